"""Looks as if it might define kernel dynamically, but does not."""
globals()["kernal"] = lambda x, weight: x
