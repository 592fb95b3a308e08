"""benchmarks/judge_clock.py's SM clock sampler, against a stand-in nvidia-smi (the comparison
itself needs a CUDA machine)."""
import math
import time

from benchmarks.judge_clock import SmClock

FAKE = """#!/bin/sh
# the arguments the sampler must pass, or nothing
case "$*" in *"--query-gpu=clocks.sm,power.draw"*"-lms 50"*) ;; *) exit 3;; esac
echo "1980, 310.5"
echo "[N/A], [N/A]"
echo "1755, 690.25"
echo "1830, 500"
exec sleep 60
"""


def _sampler(tmp_path, monkeypatch, fake: str | None) -> SmClock:
    if fake is not None:
        (tmp_path / "nvidia-smi").write_text(fake)
        (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    return SmClock(device="0")


def test_the_samples_between_two_stamps_give_the_median_clock_and_power(tmp_path, monkeypatch):
    clock = _sampler(tmp_path, monkeypatch, FAKE)
    try:
        deadline = time.monotonic() + 60  # a busy machine: wait for the lines, however slow
        while len(clock.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        got = clock.during(0.0, math.inf)
        assert got == {"sm_mhz": 1830.0, "power_w": 500.0, "samples": 3}  # "[N/A]" skipped
        assert clock.during(0.0, 1.0) is None  # before any sample
    finally:
        clock.close()
    assert clock.proc.poll() is not None  # stopped with the comparison


def test_no_nvidia_smi_means_no_samples_not_an_error(tmp_path, monkeypatch):
    clock = _sampler(tmp_path, monkeypatch, None)
    assert clock.proc is None and clock.during(0.0, math.inf) is None
    clock.close()
