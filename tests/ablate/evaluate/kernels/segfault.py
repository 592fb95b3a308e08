"""Crashes the interpreter with a segmentation fault."""
import ctypes


def kernel(x, weight):
    ctypes.string_at(0)
