"""The candidate, from the inside: a probe kernel reports what it can see and do, and every
escape fails, when the runner is root (the candidate runs as an unprivileged uid) and in a user
namespace (what a normal user's runner gets).

The probes walk large trees (the interpreter's packages): on two busy cores with another test
run beside them that takes minutes, so their evaluations get a limit of their own (PROBE_LIMIT_S),
far above what they take alone; what they assert does not depend on speed."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ablate.evaluate import _kit, _servers, evaluate
from ablate.sandbox import _bwrap

CHECKOUT = Path(__file__).resolve().parents[3]  # this checkout, wherever it is
PROBE_LIMIT_S = 900  # a candidate's run limit for the probes (60 s by default on a CPU)

PROBE = '''
import json, os, socket, sys

def status():
    out = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("Uid", "CapEff", "CapPrm", "CapAmb", "CapInh", "NoNewPrivs"):
            out[k] = v.split()[0]
    return out

def write(path):
    try:
        with open(path, "w") as f:
            f.write("tampered")
        return "ok"
    except OSError as e:
        return type(e).__name__

def connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return "connected"
    except OSError as e:
        return type(e).__name__

listing = {p: sorted(os.listdir(p)) for p in SECRETS if os.path.isdir(p)}  # before the writes below
facts = {"status": status(), "writes": {p: write(p) for p in TARGETS}, "visible": {p: os.path.exists(p) for p in SECRETS},
         "pids": sorted(p for p in os.listdir("/proc") if p.isdigit()), "net": connect(PORT),
         "root_listing": sorted(os.listdir("/")), "listing": listing}
raise RuntimeError("PROBE " + json.dumps(facts) + " END")
'''


def probe_source(port, targets, secrets) -> str:
    return f"TARGETS = {targets!r}\nSECRETS = {secrets!r}\nPORT = {port}\n" + PROBE + "\ndef kernel(x, w):\n    return x\n"


def probe(tmp_path, port, cache, targets, secrets) -> dict:
    (tmp_path / "kernel.py").write_text(probe_source(port, targets, secrets))
    return facts_of(evaluate("rmsnorm", tmp_path / "kernel.py", shapes="smoke", draws=1, scan=False,
                             timeout_s=PROBE_LIMIT_S))


def facts_of(r: dict) -> tuple[dict, dict]:
    assert r["reasons"] == ["import_error"], r["details"]
    text = r["details"]["import_error"]
    start = text.rindex("PROBE {")  # the message, not the source line the traceback quotes
    return r, json.loads(text[start + 6:text.index(" END", start)])


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    yield srv.getsockname()[1]
    srv.close()


@pytest.fixture(params=["root", "userns"])
def mode(request, monkeypatch, tmp_path):
    conf = _kit.confinement()
    if not conf.mode:
        pytest.skip(f"bubblewrap cannot run here: {conf.note}")
    if request.param == "root" and conf.mode != "root":
        pytest.skip("the runner is not root")
    if request.param == "userns" and conf.mode != "userns":
        probe_dir = tmp_path / "probe"
        probe_dir.mkdir()
        err = _bwrap.self_test(conf.binary, probe_dir, "userns", -1)
        if err:
            pytest.skip(f"user namespaces do not run here: {err}")
        forced = object.__new__(_kit.Confinement)
        forced.binary, forced.mode, forced.note = conf.binary, "userns", ""
        monkeypatch.setattr(_kit, "_CONFINEMENT", [forced])
        _servers.SPARES.close()  # candidates started under the other mode
        yield "userns"
        _servers.SPARES.close()
        return
    yield request.param


def escape_attempts(cache: Path) -> tuple[list[str], list[str]]:
    """(files a candidate tries to write, paths it must not see)."""
    targets = [str(CHECKOUT / "operators" / "rmsnorm" / "reference.py"), str(CHECKOUT / "ablate" / "evaluate" / "_judge.py"),
               str(CHECKOUT / "new-file"), str(cache / "baselines.json"), "/usr/lib/ablate-probe", "/etc/ablate-probe",
               "/ablate-probe", os.path.join(sys.prefix, "ablate-probe")]
    secrets = [str(CHECKOUT), str(CHECKOUT / "operators" / "rmsnorm" / "__init__.py"),
               str(CHECKOUT / "harnesses" / "knowledge"), str(cache), str(CHECKOUT / "runs"), "/root/.ssh",
               os.path.expanduser("~/.cache/ablate")]
    return targets, secrets


def assert_contained(r: dict, facts: dict, mode: str) -> None:
    assert r["sandbox"] == "bwrap"
    # a write may land in the sandbox's own private /tmp (where a checkout under /tmp holding the
    # interpreter's .venv shows as the path to it), never on the host
    landed = {p: res for p, res in facts["writes"].items() if res == "ok" and _written_on_host(Path(p))}
    assert not landed, facts["writes"]
    # nothing of the checkout shows; at most the directories leading to an interpreter inside it
    venvs = {p.relative_to(CHECKOUT).parts[0] for p in _bwrap.python_paths() if CHECKOUT in p.parents}
    shown = {p for p, seen in facts["visible"].items() if seen}
    assert shown <= ({str(CHECKOUT)} if venvs else set()), facts["visible"]
    assert set(facts["listing"].get(str(CHECKOUT), [])) <= venvs, facts["listing"]
    st = facts["status"]
    assert int(st["CapEff"], 16) == int(st["CapPrm"], 16) == int(st["CapAmb"], 16) == 0, st
    if mode == "root":
        assert int(st["Uid"]) != 0  # an unprivileged uid of its own
    assert len(facts["pids"]) <= 4, facts["pids"]  # its own PID namespace: bubblewrap and itself
    assert facts["net"] != "connected"
    assert "eval" in facts["root_listing"] and not {"work", "home", "srv"} & set(facts["root_listing"])


def _written_on_host(path: Path) -> bool:
    try:
        return path.read_text(errors="replace").startswith("tampered")
    except OSError:
        return False


def test_from_inside_a_candidate_every_escape_fails(tmp_path, listener, mode, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "baselines.json").write_text("{}")
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(cache))
    r, facts = probe(tmp_path, listener, cache, *escape_attempts(cache))
    assert_contained(r, facts, mode)
    assert (CHECKOUT / "operators" / "rmsnorm" / "reference.py").read_text().startswith('"""')  # untouched


def test_hidden_shapes_and_the_wiki_do_not_leak_through_a_rejection(tmp_path):
    """The evaluate tool hands rejection details to the agent: a candidate judged on public
    shapes knows only the inputs it is called with."""
    from ablate import operators

    hidden = [s for s in operators.get("rmsnorm").shape_set("eval") if s not in operators.get("rmsnorm").shape_set("public")]
    src = ("import os, sys\n"
           "found, seen = [], 0\n"
           "for top in ['/eval', '/tmp', '/root', '/home', '/work', '/opt', '/srv', sys.prefix] + sys.path:\n"
           "    for d, dirs, files in os.walk(top):\n"
           "        seen += len(files)\n"
           "        if seen > 200000:\n            break\n"
           "        for f in files:\n"
           "            if (f.endswith('.md') and 'knowledge' in d) or (f == '__init__.py' and d.endswith('rmsnorm')):\n"
           "                try:\n                    found.append(open(os.path.join(d, f)).read()[:300])\n"
           "                except OSError:\n                    pass\n"
           "try:\n    from ablate import operators\n    found.insert(0, repr(operators.get('rmsnorm').shapes))\nexcept Exception as e:\n"
           "    found.insert(0, 'no operators: ' + type(e).__name__)\n"
           "raise RuntimeError('LEAK ' + ' | '.join(found))\n"
           "def kernel(x, w):\n    return x\n")
    (tmp_path / "kernel.py").write_text(src)
    r = evaluate("rmsnorm", tmp_path / "kernel.py", shapes="public", draws=1, scan=False, timing=False,
                 timeout_s=PROBE_LIMIT_S)
    text = r["details"]["import_error"]
    assert "LEAK" in text and "no operators: ModuleNotFoundError" in text
    for s in hidden:
        assert f"'N': {s['N']}" not in text and f"\"N\": {s['N']}" not in text
    assert "HIDDEN" not in text and "provenance" not in text.lower()


def test_a_real_unprivileged_runner_if_this_machine_has_one(listener):
    """As a normal user (uid 65534) when the interpreter is readable by one (else skipped): an
    honest kernel accepted, and from inside a candidate every escape fails as it does as root."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    try:
        check = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True,
                               preexec_fn=lambda: (os.setgid(65534), os.setuid(65534)))
    except OSError:
        check = None
    if check is None or check.returncode != 0:
        pytest.skip("this interpreter is not readable by an unprivileged user")
    home = Path(tempfile.mkdtemp(prefix="ablate-unprivileged-"))  # not under tmp_path: pytest's folders are root's alone
    cache = home / "cache"
    cache.mkdir()
    (cache / "baselines.json").write_text("{}")
    targets, secrets = escape_attempts(cache)
    (home / "probe.py").write_text(probe_source(listener, targets, secrets))
    for p in (home, cache, cache / "baselines.json", home / "probe.py"):
        os.chown(p, 65534, 65534)
    code = ("import json, sys; from ablate.evaluate import evaluate; "
            f"r = evaluate('rmsnorm', {str(CHECKOUT / 'tests/ablate/evaluate/kernels/honest_torch.py')!r}, shapes='smoke', draws=1); "
            f"p = evaluate('rmsnorm', {str(home / 'probe.py')!r}, shapes='smoke', draws=1, scan=False, "
            f"timeout_s={PROBE_LIMIT_S}); "
            "print(json.dumps([r['verdict'], r['sandbox'], p]))")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=CHECKOUT,
                             timeout=3 * PROBE_LIMIT_S,
                             env={**os.environ, "HOME": str(home), "ABLATE_CACHE_DIR": str(cache)},
                             preexec_fn=lambda: (os.setgid(65534), os.setuid(65534)))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    verdict, sandbox, probed = json.loads(out.stdout.strip().splitlines()[-1])
    assert [verdict, sandbox] == ["accepted", "bwrap"]
    assert_contained(*facts_of(probed), "userns")


def test_a_candidate_has_a_user_name_without_a_passwd_entry(monkeypatch):
    """The sandbox's uid has no passwd entry; Inductor names its cache folder by getpass.getuser()
    when torch.compile is imported, which then fails unless the environment names the user."""
    import getpass
    import pwd

    env = _kit.candidate_env("/e", "cpu", confined=True)
    for k in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(k, raising=False)
        if k in env:
            monkeypatch.setenv(k, env[k])

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert getpass.getuser() == "candidate"


LIBRARY_PROBE = '''
import importlib, json

def load(name):
    try:
        return "loaded" if getattr(importlib.import_module(name), "__file__", None) else "empty"
    except ImportError as e:
        return type(e).__name__

raise RuntimeError("PROBE " + json.dumps({n: load(n) for n in ("tabulate", "json")}) + " END")

def kernel(x, w):
    return x
'''


def test_a_candidate_finds_no_kernel_library_to_call(tmp_path, monkeypatch):
    """The kernel libraries are not shown in a candidate's sandbox, so a name the static scan
    cannot read (importlib of a computed name, which raises no audit event) finds nothing to call.
    tabulate stands in for them (no kernel library is installed on a CPU machine); json is shown."""
    from ablate.operators import _library_ops

    if not _kit.confinement().mode:
        pytest.skip(f"bubblewrap cannot run here: {_kit.confinement().note}")
    import tabulate  # noqa: F401 (installed: the stand-in must exist on the host for the test to mean anything)

    monkeypatch.setattr(_library_ops, "KERNEL_LIBRARIES", (*_library_ops.KERNEL_LIBRARIES, "tabulate"))
    _servers.SPARES.close()  # candidates started before the stand-in was listed
    try:
        (tmp_path / "kernel.py").write_text(LIBRARY_PROBE)
        _, facts = facts_of(evaluate("rmsnorm", tmp_path / "kernel.py", shapes="smoke", draws=1, scan=False,
                                     timeout_s=PROBE_LIMIT_S))
    finally:
        _servers.SPARES.close()
    assert facts["json"] == "loaded" and facts["tabulate"] in ("empty", "ModuleNotFoundError"), facts
