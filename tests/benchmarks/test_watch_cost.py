"""benchmarks/watch_cost.py on the CPU: one line per batch size and reading, the machine first."""
import json

from benchmarks import watch_cost


def test_each_batch_size_is_timed_unwatched_and_with_both_readings(tmp_path):
    out = tmp_path / "watch.jsonl"
    assert watch_cost.main(["--calls", "1", "3", "--repeats", "1", "--out", str(out)]) == 0
    head, *rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert "command" in head and "torch" in head
    assert [(r["calls"], r["reading"]) for r in rows] == [
        (n, reading) for n in (1, 3) for reading in ("unwatched", "watch", "key_averages")]
    assert all(r["ms_per_batch"] > 0 for r in rows)


def test_sessions_adds_one_line_of_the_sessions_that_missed_a_kernel(tmp_path):
    out = tmp_path / "watch.jsonl"
    assert watch_cost.main(["--calls", "1", "--repeats", "1", "--sessions", "3", "--out", str(out)]) == 0
    last = json.loads(out.read_text().splitlines()[-1])
    assert last["sessions"] == 3 and last["missed"] == []  # a CPU records no device kernel to miss
    assert last["padding_lost"] == 0 and last["padding"] >= 0  # nor pads a session


def test_a_negative_session_count_stops_it_in_one_line(capsys):
    import pytest

    with pytest.raises(SystemExit):
        watch_cost.main(["--sessions", "-1"])
    assert "--sessions -1: a count of sessions" in capsys.readouterr().err
