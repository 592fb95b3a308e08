"""benchmarks/check_set_cost.py on the CPU: each way of calling, per shape, through the judge's own
messages to its library process; bad names stop it in one line."""
import json

import pytest

from benchmarks import check_set_cost


def test_each_shape_is_called_each_way_and_its_first_call_kept_apart(tmp_path):
    out = tmp_path / "sets.jsonl"
    assert check_set_cost.main(["--operator", "rmsnorm", "--shapes", "smoke", "--sets", "2", "--out", str(out)]) == 0
    head, *rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert "command" in head and "torch" in head
    ways = list(check_set_cost.WAYS)
    assert [r["way"] for r in rows] == ways * (len(rows) // len(ways)) and len(rows) == 2 * len(ways)
    for r in rows:
        assert r["library"] == "torch_eager" and r["device"] == "cpu"
        assert r["calls"] == (1 if r["way"] == ways[0] else 2)  # the shape's first call is not among them
        assert 0 < r["p10_ms"] <= r["median_ms"] <= r["p90_ms"] and r["first_call_ms"] > 0 and r["read_median_ms"] > 0


@pytest.mark.parametrize("args, says", [(["--operator", "no_such_op"], "no_such_op"),
                                        (["--library", "no_such_library"], "no library 'no_such_library'")])
def test_a_name_that_is_not_there_stops_it_in_one_line(args, says, capsys):
    with pytest.raises(SystemExit) as e:
        check_set_cost.main(args)
    assert e.value.code == 2 and says in capsys.readouterr().err
