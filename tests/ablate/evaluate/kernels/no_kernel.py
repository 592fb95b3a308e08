"""Defines the wrong name."""


def rmsnorm(x, weight):
    return x
