"""One evaluation at a time per GPU: the judge's lock (ablate.evaluate._gpu.DeviceLock). Runs
without a GPU: the lock is a file; the judge takes it only on a GPU (test_gpu.py shows that).

Nothing here depends on how fast this machine is: a process that must wait is watched until it
says it waits (however long its imports take on busy cores), then seen still waiting; the
deadlines (SLOW_S) only bound a test that would otherwise hang."""
import os
import subprocess
import sys
import threading
import time

from ablate.evaluate._gpu import DeviceLock

SLOW_S = 300  # the longest a step may take before the test gives up (seconds: imports under load)

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
        deadline = time.monotonic() + SLOW_S
        while time.monotonic() < deadline and not any(n.startswith("still waiting") for n in notes):
            time.sleep(0.05)
        assert not got.is_set(), "took the GPU while another evaluation held it"
        assert notes and f"pid {holder.pid} (the holder)" in notes[0]
        assert any(n.startswith("still waiting for the GPU") and f"pid {holder.pid}" in n for n in notes[1:])
        holder.kill()  # a holder that dies releases it: no stale lock
        assert got.wait(SLOW_S)
        waiter.join(SLOW_S)
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
# A process that is not the holder's child starts CHILD and reports whether it waits: it reads the
# child's lines until the child says it waits for the GPU (however long its imports take), then
# checks the child is still waiting a second later, and ends it.
OUTSIDER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-u", "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
for line in child.stdout:
    print(line.strip(), flush=True)
    if "waiting for the GPU: pid" in line:
        time.sleep(1)
        print("STILL WAITING" if child.poll() is None else "STOPPED WAITING", flush=True)
        break
child.kill()
child.wait()
"""


def test_a_judge_started_by_the_trial_that_holds_the_gpu_goes_ahead_under_its_hold(tmp_path):
    """The trial holds its GPU for its agent and its verdict; its own judge must not wait for it
    (it would wait forever), while a judge of any other process still does."""
    trial = DeviceLock("GPU-test", str(tmp_path))
    assert trial.acquire(print, "trial t1")
    try:
        child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                               timeout=SLOW_S)
        assert child.stdout.strip().splitlines()[-1] == "child True True", child.stdout + child.stderr
        # a grandchild (not started by the holder) waits
        outsider = subprocess.run([sys.executable, "-c", OUTSIDER, CHILD, str(tmp_path)], capture_output=True,
                                  text=True, timeout=SLOW_S)
        assert "waiting for the GPU: pid" in outsider.stdout and "STILL WAITING" in outsider.stdout, \
            outsider.stdout + outsider.stderr
        assert "child True" not in outsider.stdout
    finally:
        trial.release()
