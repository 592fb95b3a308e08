"""Crashes the interpreter with a segmentation fault."""
import faulthandler


def kernel(x, weight):
    faulthandler._sigsegv()
