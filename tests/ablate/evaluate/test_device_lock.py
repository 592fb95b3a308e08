"""One evaluation at a time per GPU: the judge's lock (ablate.evaluate._gpu.DeviceLock). Runs
without a GPU: the lock is a file; the judge takes it only on a GPU (test_gpu.py shows that)."""
import os
import subprocess
import sys
import threading
import time

from ablate.evaluate._gpu import DeviceLock

HOLD = ("import sys, time; from ablate.evaluate._gpu import DeviceLock; "
        "lock = DeviceLock('GPU-test', sys.argv[1]); assert lock.acquire(print, 'the holder'); "
        "print('held', flush=True); sys.stdin.readline()")


def test_a_second_evaluation_waits_for_the_first_and_says_who_holds_the_gpu(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        notes, got = [], threading.Event()
        lock = DeviceLock("GPU-test", str(tmp_path))
        lock.REMIND_S = 0.2  # a line every minute in use, so that a waiting judge's caller keeps waiting
        waiter = threading.Thread(target=lambda: lock.acquire(notes.append, "the waiter") and got.set())
        waiter.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(n.startswith("still waiting") for n in notes):
            time.sleep(0.05)
        assert not got.is_set(), "took the GPU while another evaluation held it"
        assert notes and f"pid {holder.pid} (the holder)" in notes[0]
        assert any(n.startswith("still waiting for the GPU") and f"pid {holder.pid}" in n for n in notes[1:])
        holder.kill()  # a holder that dies releases it: no stale lock
        assert got.wait(10)
        waiter.join(5)
        assert "the GPU is free after" in notes[-1]
        assert open(lock.path).read() == f"pid {os.getpid()} (the waiter)"
        lock.release()
        again = DeviceLock("GPU-test", str(tmp_path))
        seen = len(notes)
        assert again.acquire(notes.append) and len(notes) == seen  # free: no wait, no note
        again.release()
    finally:
        holder.kill()


def test_different_gpus_do_not_wait_for_each_other(tmp_path):
    a, b = DeviceLock("GPU-aaaa", str(tmp_path)), DeviceLock("GPU-bbbb", str(tmp_path))
    notes = []
    assert a.acquire(notes.append) and b.acquire(notes.append) and notes == []
    a.release()
    b.release()


def test_an_unusable_lock_directory_is_reported_not_waited_on(tmp_path):
    lock = DeviceLock("GPU-test", str(tmp_path / "missing"))
    assert lock.acquire(print) is False and "missing" in lock.why


CHILD = ("import sys; from ablate.evaluate._gpu import DeviceLock; "
         "lock = DeviceLock('GPU-test', sys.argv[1]); ok = lock.acquire(print, 'a judge', parent_may_hold=True); "
         "print('child', ok, lock.by_parent, flush=True)")


def test_a_judge_started_by_the_trial_that_holds_the_gpu_goes_ahead_under_its_hold(tmp_path):
    """The trial holds its GPU for its agent and its verdict; its own judge must not wait for it
    (it would wait forever), while a judge of any other process still does."""
    trial = DeviceLock("GPU-test", str(tmp_path))
    assert trial.acquire(print, "trial t1")
    try:
        child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=30)
        assert child.stdout.strip().splitlines()[-1] == "child True True", child.stdout + child.stderr
        # a grandchild (not started by the holder) waits: shown by a timeout (long enough to import under load)
        outsider = subprocess.run([sys.executable, "-c", "import subprocess, sys; "
                                   "subprocess.run([sys.executable, '-c', sys.argv[1], sys.argv[2]], timeout=8)",
                                   CHILD, str(tmp_path)], capture_output=True, text=True, timeout=30)
        assert "TimeoutExpired" in outsider.stderr and "waiting for the GPU: pid" in outsider.stdout
    finally:
        trial.release()

