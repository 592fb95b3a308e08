"""Never returns."""


def kernel(x, weight):
    while True:
        pass
