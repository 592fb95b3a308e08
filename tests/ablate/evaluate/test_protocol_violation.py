"""A judge that breaks on what the candidate sent it is the candidate's rejection
(protocol_violation), never an evaluator failure: the runner retries an EvaluatorFailure as
infrastructure, and would judge the same kernel again and again. The judge says who caused a
failure ({"kind": "failure", "cause": "candidate"}); the supervisor's side is shown here with a
stand-in judge, so it holds whatever the judge's own code does."""
import pytest

from ablate.evaluate import EvaluatorFailure, REASONS, _servers, evaluate


class StandInJudge:
    """The supervisor's view of a judge process: ready at once; fails, with `cause`, once it holds
    the candidate's socket (`when` = "candidate") or when told how the candidate ended ("end")."""

    def __init__(self, cause, when):
        self.cause, self.when = cause, when
        self.queue, self.pending, self.running, self.closed = [], [], True, False

    def send(self, kind, fds=(), **msg):
        if kind == "request":
            self.queue.append({"kind": "ready", "device": "cpu", "setup_s": {}})
        elif kind == self.when:
            failure = {"kind": "failure", "message": "Traceback ...\nValueError: entry 3 ends past the file"}
            self.queue.append({**failure, **({"cause": self.cause} if self.cause else {})})
            self.running = self.when == "end"  # a judge that failed mid-evaluation exits
        elif kind == "end":
            self.queue.append({"kind": "result", "result": {"verdict": "accepted", "reasons": []}})

    def says(self, limit):
        if not self.queue:
            raise EvaluatorFailure("the stand-in judge has nothing to say")
        return self.queue.pop(0)

    def progress(self, report):
        self.pending += self.queue
        self.queue = []

    def alive(self):
        return self.running

    def log_tail(self, n=3000):
        return ""

    def close(self):
        self.closed = True


@pytest.fixture
def stand_in(monkeypatch):
    def use(cause, when):
        judge = StandInJudge(cause, when)
        monkeypatch.setattr(_servers.JUDGES, "acquire", lambda key: judge)
        return judge

    return use


@pytest.mark.parametrize("when", ["candidate", "end"])
def test_a_judge_failure_the_candidate_caused_is_its_rejection(stand_in, kernels, when):
    judge = stand_in("candidate", when)
    r = evaluate("rmsnorm", kernels / "honest_torch.py", shapes="smoke", draws=1, timeout_s=2)
    assert r["verdict"] == "rejected" and r["reasons"] == ["protocol_violation"], r
    assert "entry 3 ends past the file" in r["details"]["protocol_violation"]
    assert r["checks"]["protocol_violation"] == "fail" and "protocol_violation" in REASONS
    assert judge.closed  # a judge that broke is never used again


@pytest.mark.parametrize("when", ["candidate", "end"])
def test_a_judge_failure_of_its_own_is_still_an_evaluator_failure(stand_in, kernels, when):
    judge = stand_in(None, when)
    with pytest.raises(EvaluatorFailure, match="entry 3 ends past the file"):
        evaluate("rmsnorm", kernels / "honest_torch.py", shapes="smoke", draws=1, timeout_s=2)
    assert judge.closed
