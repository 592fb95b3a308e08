"""Identity checks name replaced timers and replaced library functions."""
import time

import torch

from ablate.evaluate._integrity import Snapshot


def test_intact_snapshot_reports_nothing():
    assert Snapshot().tampered() == {"timer_tampered": [], "driver_tampered": []}


def test_replaced_timer_and_library_function_are_named(monkeypatch):
    snap = Snapshot()
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(torch, "equal", lambda a, b: True)
    found = snap.tampered()
    assert found["timer_tampered"] == ["time.perf_counter"]
    assert found["driver_tampered"] == ["torch.equal"]
