"""Takes one argument; rmsnorm has two inputs."""


def kernel(x):
    return x
