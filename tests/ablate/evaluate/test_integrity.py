"""Identity checks catch replaced timers and replaced driver functions."""
import time

from ablate.evaluate import _timing
from ablate.evaluate._integrity import Snapshot


def test_intact_snapshot_reports_nothing():
    snap = Snapshot([_timing])
    assert snap.tampered() == {"timer_tampered": [], "driver_tampered": []}


def test_replaced_timer_and_driver_function_are_named(monkeypatch):
    snap = Snapshot([_timing])
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(_timing, "measure", lambda *a, **k: None)
    found = snap.tampered()
    assert found["timer_tampered"] == ["time.perf_counter"]
    assert "ablate.evaluate._timing.measure" in found["driver_tampered"]


def test_replaced_method_of_a_driver_class_is_caught(monkeypatch):
    from ablate.evaluate import _driver

    snap = Snapshot([_driver])
    monkeypatch.setattr(_driver.Channel, "send", lambda self, kind, **d: None)
    assert any(n.endswith("Channel.send") for n in snap.tampered()["driver_tampered"])
