"""The `scripted` model: a deterministic, non-LLM policy. The offline default and a control arm.

Policy "kernel-search": read the task, take the operator's parameterised Triton template
(``scripted_templates/<operator>.py``, outside every agent workspace) and search its
configurations with the tools the harness gives it:
- search (every arm: the shell is a core tool): writes the template and its own test script
  (``check.py``) and runs a sweep of the template's configurations in one command, each judged
  on every public shape against reference.py and timed, within a share of the trial's time
  budget (SWEEP_SHARE, at most SWEEP_MAX_S); the seed orders the configurations after the
  recommended ones and the template's default; on a GPU it also checks and times them on variant
  shapes (``variants``: each public shape's innermost dimension halved) and leaves aside a
  configuration more than VARIANT_LOSS slower than the best on one of them (``robust``);
- dispatch: where the sweep measured another configuration faster on some public shape beyond
  the noise margin and slower on none, the kernel dispatches that shape to it (SHAPE_CONFIGS);
  every other shape, hidden ones included, gets the best robust configuration over all public shapes;
- knowledge: looks the operator up in the wiki; configurations its tables recommend are swept
  first (``configs_from_knowledge``, ``choose_configs``);
- workflow: writes each phase's draft and plan, takes the sweep's best configurations through
  implement, validate and measure (correct: the best; optimise: the next ones, in directions of
  at most the controller's iteration cap; specialise: the dispatching kernel, when the sweep found
  one), and decides keep / revise / reject by the controller's measurements;
- search mechanism: registers each kernel it stands behind as a candidate with its parent and change;
- evaluate tool: evaluates each candidate with the trusted evaluator; a rejected one goes no further;
- profiler: profiles the first correct kernel and cites the diagnosis as the evidence of its
  optimisation direction;
- reviewer: when a reviewer objects that the final kernel.py was not tested after its last
  change, tests it and submits again.
Asked without tools (a review request) it reviews for real: evidence on the final file, masks,
no call into the reference. Policy "actions": play a fixed list of tool calls (for tests), then submit.

The policy is a straight-line function replayed from the start on every turn: each tool call
has a stable id, and a call already answered returns its recorded result, so decisions depend
only on what the tools said and on the seed (``seed`` in the model config, else the trial's seed,
which the trial passes as ``trial_seed``).
"""
from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.errors import AblateError
from ablate.models._protocol import Message, Response, ToolCall, ToolSpec, Usage

TEMPLATES = Path(__file__).resolve().parent / "scripted_templates"
POLICIES = ("kernel-search", "actions")
MARGIN = 0.02  # the same "measurably faster" as the harness's own rule
SWEEP_SHARE = 0.05  # of the trial's tightest time budget (tool, GPU or wall seconds) the sweep may take
SWEEP_MAX_S = 150.0
SWEEP_MIN_S = 20.0
CPU_CONFIGS = 3  # configurations swept under Triton's CPU interpreter, whose timings mean little
VARIANT_LOSS = 0.10  # a configuration this much slower than the best on a variant shape is fragile

# The policy's own test, and its search over the template's configurations (every arm has a shell).
CHECK_SCRIPT = '''\
# The policy's own test: a kernel on every public shape of shapes.json against reference.py (two
# seeds), then its median time on each shape.
#   python check.py kernel.py   one file: RESULT correct=<0|1> max_err=.. ms=<geomean> shapes_ms=[..]
#   python check.py sweep       template.py at each configuration of CONFIGS in order, until SECONDS
#                               have passed (the first is always tried): one RESULT line each, ending
#                               in config=<index>; a configuration that breaks the CUDA context is
#                               reported and the sweep goes on in a fresh process. The sweep also checks
#                               and times each configuration on VARIANTS, shapes that are not public
#                               (variants_ms=[..]), so that a choice does not rest on the public shapes alone.
import importlib.util, json, math, statistics, subprocess, sys, time

import torch
from reference import example_inputs, reference

OPERATOR = {operator!r}
CONFIGS = {configs}
SECONDS = {seconds}
VARIANTS = {variants}
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def load(path):
    spec = importlib.util.spec_from_file_location("candidate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def close(got, want, inputs):
    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
    want = tuple(want) if isinstance(want, (tuple, list)) else (want,)
    if len(got) != len(want):
        return False, float("inf")
    if OPERATOR == "topk":  # any tied column is right: exact values, distinct indices that point at them
        (v, i), (wv, _), x = got, want, inputs[0]
        ok = (v.shape == wv.shape and i.shape == wv.shape and i.dtype == torch.int64 and torch.equal(v, wv)
              and bool(((i >= 0) & (i < x.shape[1])).all()) and torch.equal(x.gather(1, i.clamp(0, x.shape[1] - 1)), v)
              and bool((i.sort(dim=1).values.diff(dim=1) != 0).all()))
        return ok, 0.0 if ok else float("inf")
    ok, worst = True, 0.0
    for g, w in zip(got, want):
        if not isinstance(g, torch.Tensor) or g.shape != w.shape or g.dtype != w.dtype:
            return False, float("inf")
        diff = (g.float() - w.float()).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        ok = ok and bool(torch.isfinite(g.float()).all()) and torch.allclose(g.float(), w.float(), atol=2e-2, rtol=2e-2)
    return ok, worst


def cases(shapes):
    out = []
    for shape in shapes:
        dims = {{k: v for k, v in shape.items() if k != "dtype"}}
        sets = []
        for seed in (1, 2):
            inputs = example_inputs(**dims, device=DEVICE, seed=seed)
            sets.append((inputs, reference(*inputs)))
        out.append(sets)
    return out


def variant_cases():
    out = []
    for shape in VARIANTS:  # a variant the reference does not take is left out
        try:
            out += cases([shape])
        except Exception as e:
            print(f"VARIANT {{json.dumps(shape)}} left out: {{type(e).__name__}}", flush=True)
    return out


def timed(fn):
    if DEVICE == "cuda":
        from triton.testing import do_bench
        return do_bench(fn, warmup=10, rep=50, return_mode="median")
    fn()
    samples = []
    for _ in range(3):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


def measure(kernel, data):
    worst, shapes_ms = 0.0, []
    for sets in data:
        for inputs, want in sets:
            good, err = close(kernel(*inputs), want, inputs)
            worst = max(worst, err)
            if not good:
                return False, worst, []
        shapes_ms.append(timed(lambda: kernel(*sets[0][0])))
    return True, worst, shapes_ms


def result(ok, worst, shapes_ms, variants_ms=None):
    ms = math.exp(sum(math.log(t) for t in shapes_ms) / len(shapes_ms)) if ok and shapes_ms else float("nan")
    line = f"RESULT correct={{int(ok)}} max_err={{worst:.3g}} ms={{ms:.6g}} shapes_ms={{json.dumps([round(t, 6) for t in shapes_ms])}}"
    return line if variants_ms is None else line + f" variants_ms={{json.dumps([round(t, 6) for t in variants_ms])}}"


def swept(kernel, data, variants):
    ok, worst, shapes_ms = measure(kernel, data)
    if not ok:
        return result(ok, worst, shapes_ms)
    ok, v_worst, variants_ms = measure(kernel, variants)
    return result(ok, max(worst, v_worst), shapes_ms if ok else [], variants_ms)


def worker(start, deadline):
    data, variants = cases(json.load(open("shapes.json"))), variant_cases()
    mod = load("template.py")
    for i in range(start, len(CONFIGS)):
        if i > start and time.time() > deadline:
            print(f"STOPPED before config={{i}}: the search's {{SECONDS}} s are spent", flush=True)
            return
        print(f"TRYING {{i}}", flush=True)
        mod.CONFIG = CONFIGS[i]
        try:
            print(swept(mod.kernel, data, variants) + f" config={{i}}", flush=True)
        except Exception as e:
            print(f"RESULT correct=0 error={{type(e).__name__}} config={{i}}: {{str(e)[:300]!r}}", flush=True)
            if "CUDA error" in str(e) or "illegal memory access" in str(e) or "AcceleratorError" in type(e).__name__:
                sys.exit(3)  # the CUDA context is lost: a fresh process carries on


def sweep():
    t0 = time.time()
    deadline, start = t0 + SECONDS, 0
    while start < len(CONFIGS):
        p = subprocess.run([sys.executable, __file__, "worker", str(start), str(deadline)], capture_output=True, text=True)
        sys.stdout.write(p.stdout)
        lines = p.stdout.splitlines()
        tried = [int(ln.split()[1]) for ln in lines if ln.startswith("TRYING ")]
        if p.returncode == 0 or not tried or time.time() > deadline:
            if p.returncode != 0:
                print(p.stderr[-3000:])
            break
        if not any(ln.startswith("RESULT") and ln.split(":")[0].endswith(f"config={{tried[-1]}}") for ln in lines):
            print(f"RESULT correct=0 error=crashed config={{tried[-1]}}: {{p.stderr.strip()[-300:]!r}}")
        start = tried[-1] + 1
    print(f"SWEEP {{len(CONFIGS)}} configurations listed, {{time.time() - t0:.1f}} s")


if __name__ == "__main__":
    if sys.argv[1] == "sweep":
        sweep()
    elif sys.argv[1] == "worker":
        worker(int(sys.argv[2]), float(sys.argv[3]))
    else:
        print(result(*measure(load(sys.argv[1]).kernel, cases(json.load(open("shapes.json"))))))
'''

PASSTHROUGH = '''\
# No template for this operator: the scripted policy falls back to the reference itself, which the
# evaluator rejects as a library passthrough (it is not a kernel of the agent's own).
from reference import reference as kernel
'''


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


# -- template rendering ------------------------------------------------------------------------
def template(operator: str) -> tuple[str, list[dict[str, Any]]] | None:
    """(source, configs) of the operator's template, or None if there is none."""
    path = TEMPLATES / f"{operator.split('/')[-1]}.py"
    if not path.is_file():
        return None
    source = path.read_text()
    first = source.splitlines()[0]
    if not first.startswith("# scripted-configs:"):
        raise ValueError(f"{path}: first line must be '# scripted-configs: [...]'")
    return source, json.loads(first.split(":", 1)[1])


def shape_key(shape: Mapping[str, Any]) -> str:
    """The key a template's SHAPE_CONFIGS uses for a shape: its dimensions in order, no dtype."""
    return ",".join(f"{k}={v}" for k, v in shape.items() if k != "dtype")


def render(source: str, config: dict[str, Any], shape_configs: dict[str, dict[str, Any]] | None = None) -> str:
    """The template with its CONFIG line set to one configuration and, when given, its
    SHAPE_CONFIGS line to the shapes dispatched to other configurations."""
    out, n = re.subn(r"^CONFIG = .*$", f"CONFIG = {config!r}", source, count=1, flags=re.M)
    if n != 1:
        raise ValueError("template has no 'CONFIG = ...' line")
    if shape_configs:
        table = "{" + ", ".join(f"{k!r}: {v!r}" for k, v in sorted(shape_configs.items())) + "}"
        out, n = re.subn(r"^SHAPE_CONFIGS = \{\}(.*)$", lambda m: f"SHAPE_CONFIGS = {table}{m.group(1)}", out,
                         count=1, flags=re.M)
        if n != 1:
            raise ValueError("template has no 'SHAPE_CONFIGS = {}' line")
    return out


# -- choice of configuration ----------------------------------------------------------------
def variants(shapes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Shapes the sweep also measures, beyond the public ones: each public shape with its innermost
    dimension halved (the head dim, the row width, the reduction depth), since the hidden shapes
    differ from the public ones and those sizes change which tile fits."""
    out: list[dict[str, Any]] = []
    for shape in shapes:
        dims = [k for k, v in shape.items() if k != "dtype" and isinstance(v, int)]
        if dims and shape[dims[-1]] >= 2:
            variant = {**shape, dims[-1]: shape[dims[-1]] // 2}
            if variant not in shapes and variant not in out:
                out.append(variant)
    return out


def robust(results: list["_Swept"], loss: float = VARIANT_LOSS) -> list["_Swept"]:
    """The correct configurations no more than `loss` slower than the fastest on every variant shape
    (all of them when none is): a public-shape win bought with a clear loss elsewhere is not chosen."""
    n = min((len(r.variants_ms) for r in results), default=0)
    best = [min(r.variants_ms[v] for r in results) for v in range(n)]
    kept = [r for r in results if all(r.variants_ms[v] <= best[v] * (1 + loss) for v in range(n))]
    return kept or results


def configs_from_knowledge(search_output: str, default: dict[str, Any]) -> list[dict[str, Any]]:
    """Configurations recommended by the tables of knowledge-base search results. A table counts
    when its columns name at least two of the template's keys ("num warps" -> num_warps), or the
    only one; each row gives those keys, the template's default configuration the others."""
    try:
        hits = json.loads(search_output)
    except (json.JSONDecodeError, TypeError):
        return []
    keys = set(default)
    found: list[dict[str, Any]] = []
    for hit in hits if isinstance(hits, list) else []:
        rows = [[c.strip() for c in line.strip().strip("|").split("|")]
                for line in str(hit.get("text", "")).splitlines() if line.strip().startswith("|")]
        if len(rows) < 3:
            continue
        header = [re.sub(r"\W+", "_", h.lower()).strip("_") for h in rows[0]]
        named = [k for k in default if k in header]
        if len(named) < min(2, len(keys)):
            continue
        for row in rows[2:]:
            try:
                config = {**default, **{k: int(row[header.index(k)]) for k in named}}
            except (ValueError, IndexError):
                continue
            if config not in found:
                found.append(config)
    return found


def choose_configs(configs: list[dict[str, Any]], recommended: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """The order to try the template's configurations in: the recommended ones first (in the
    table's order), then the template's default (its first), then the rest in an order the seed
    draws, so that seeds search differently and each seed always the same way."""
    first = [configs[configs.index(c)] for c in recommended if c in configs]  # the template's own dicts (key order)
    if configs and configs[0] not in first:
        first.append(configs[0])
    rest = [c for c in configs if c not in first]
    random.Random(seed).shuffle(rest)
    return first + rest


def dispatch_wins(new: list[float | None], old: list[float | None], margin: float = MARGIN) -> bool:
    """A shape-specialised kernel's case: measurably faster on some shape, measurably slower on none
    (the workflow controller's rule for its specialise phase)."""
    pairs = list(zip(new, old))
    wins = any(a is not None and b is not None and a < b * (1 - margin) for a, b in pairs)
    losses = any(a is None or (b is not None and a > b * (1 + margin)) for a, b in pairs)
    return bool(pairs) and wins and not losses


# -- the review a scripted reviewer gives ----------------------------------------------------
def review(request: str) -> str:
    """APPROVE, or REVISE with numbered objections: evidence on the exact file, masks, no reference call."""
    evidence = request.split("Evidence since kernel.py last changed:", 1)[-1].split("Objections from earlier", 1)[0]
    kernel = request.split("under review", 1)[-1].split("Evidence since", 1)[0]
    objections = []
    if "none: kernel.py was not tested" in evidence:
        objections.append("kernel.py was not tested after its last change: run the correctness check and the "
                          "timing on this exact file, then submit again.")
    if "from reference import" in kernel or "reference(" in kernel.split("def kernel", 1)[-1]:
        objections.append("kernel.py calls the reference instead of computing the operator itself.")
    if "tl.load" in kernel and "mask" not in kernel:
        objections.append("loads are not masked: rows whose length is not a multiple of the block read past the end.")
    if objections:
        return "REVISE\n" + "\n".join(f"{i}. {o}" for i, o in enumerate(objections, 1))
    return "APPROVE\nThe final kernel was tested after its last change; loads are masked and nothing calls the reference."


@dataclass
class _Next(Exception):
    text: str
    call: ToolCall


class _Script:
    """Replays the policy: ``act`` returns a recorded tool result, or raises the next call."""

    def __init__(self, results: dict[str, tuple[str, bool]]):
        self.results, self.n = results, 0

    def act(self, text: str, tool: str, **args) -> tuple[str, bool]:
        cid = f"s{self.n}-{tool}"
        self.n += 1
        if cid in self.results:
            return self.results[cid]
        raise _Next(text, ToolCall(cid, tool, args))


@dataclass
class _Task:
    operator: str
    turns: int
    shapes: list[dict[str, Any]]
    gpu: bool
    seconds: dict[str, float] = field(default_factory=dict)  # the budget's time limits: tool, gpu, wall


def _task(prompt: str) -> _Task:
    """The facts the policy needs from the task statement (harnesses/prompts/task.md)."""
    operator = m.group(1) if (m := re.search(r"^Operator: (\S+)", prompt, re.M)) else "unknown"
    budget = m.group(1) if (m := re.search(r"^Budget: (.*)$", prompt, re.M)) else ""
    turns = int(m.group(1)) if (m := re.search(r"(\d+) turns", budget)) else 40
    seconds = {name: float(m.group(1)) for name, unit in (("wall", "s wall time"), ("tool", "s of tool time"),
                                                          ("gpu", "GPU-seconds"))
               if (m := re.search(rf"([\d.e+]+) {unit}", budget))}
    shapes = re.search(r"^(?:Public shapes|Shapes)[^:]*: (\[.*\])$", prompt, re.M)
    gpu = bool(re.search(r"^Target: an NVIDIA GPU", prompt, re.M))
    return _Task(operator, turns, json.loads(shapes.group(1)) if shapes else [], gpu, seconds)


class ScriptedModel:
    def __init__(self, policy: str = "kernel-search", actions: list[dict[str, Any]] | None = None, seed: int = 0):
        self.policy = policy
        self.actions = list(actions or [])
        self.seed = int(seed)
        self.id = f"scripted-{policy}-v1"

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "ScriptedModel":
        cls.preflight(cfg)
        seed = cfg.get("seed") if cfg.get("seed") is not None else cfg.get("trial_seed")
        return cls(cfg.get("policy") or "kernel-search", [dict(a) for a in cfg.get("actions") or []], int(seed or 0))

    @classmethod
    def preflight(cls, cfg: Mapping[str, Any]) -> None:
        if (cfg.get("policy") or "kernel-search") not in POLICIES:
            raise AblateError(f"unknown scripted policy {cfg.get('policy')!r}; valid policies: {', '.join(POLICIES)}")

    def max_cost_of_next_call(self, system, messages, tools) -> float:
        return 0.0

    def generate(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> Response:
        if not tools:
            text, calls = review(messages[-1].content if messages else ""), []
        else:
            if self.policy == "actions":
                step = sum(1 for m in messages if m.role == "assistant" and m.tool_calls)
                text, call = self._next_action(step)
            else:
                text, call = self._kernel_search(system, messages, tools)
            calls = [call] if call else []
        prompt_chars = len(system) + sum(len(m.content) for m in messages)
        usage = Usage(input_tokens=_tokens(" " * prompt_chars), output_tokens=_tokens(text + json.dumps([c.arguments for c in calls])), calls=1)
        return Response(text=text, tool_calls=calls, usage=usage, stop_reason="tool_use" if calls else "end")

    def _next_action(self, step: int) -> tuple[str, ToolCall | None]:
        if step < len(self.actions):
            a = self.actions[step]
            return f"action {step}", ToolCall(f"a{step}", a["tool"], dict(a.get("args", {})))
        if step == len(self.actions):
            return "submitting", ToolCall(f"a{step}", "submit", {})
        return "done", None

    def _kernel_search(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> tuple[str, ToolCall | None]:
        results = {m.tool_call_id: (m.content, m.is_error) for m in messages if m.role == "tool"}
        try:
            _Policy(_Script(results), _task(messages[0].content), {t.name: t for t in tools}, system, self.seed).run()
        except _Next as nxt:
            return nxt.text, nxt.call
        return "Done: the harness did not accept the submission and there is nothing left to try.", None


@dataclass
class _Swept:
    """One configuration's result in the sweep."""

    index: int
    config: dict[str, Any]
    correct: bool
    ms: float | None
    shapes_ms: list[float]
    variants_ms: list[float] = field(default_factory=list)


class _Policy:
    """One trial of the kernel-search policy, as straight-line code over the tools' answers."""

    def __init__(self, script: _Script, task: _Task, tools: dict[str, ToolSpec], system: str, seed: int):
        self.s, self.task, self.tools, self.seed = script, task, set(tools), seed
        self.workflow, self.search, self.evaluate = "workflow" in tools, "candidate" in tools, "evaluate" in tools
        self.measured = self.workflow or self.search or self.evaluate  # a harness measurement to decide by
        m = re.search(r"killed after ([\d.]+) seconds", tools["bash"].description) if "bash" in tools else None
        self.command_s = float(m.group(1)) if m else 300.0
        m = re.search(r"at most (\d+) iterations per direction", system)
        self.per_direction = int(m.group(1)) if m else 5
        self.kept: dict[str, Any] | None = None  # the workflow's kept candidate: config, ms, shapes_ms
        self.diagnosis: list[str] = []
        self.benefit = "medium"  # of the optimisation direction, until a profile says otherwise
        self.sweep_note = ""
        self.source = ""
        self.ids: dict[str, str] = {}  # configuration (as JSON) -> its candidate id in the search's lineage

    # -- the plan --------------------------------------------------------------------------
    def run(self) -> None:
        act, op = self.s.act, self.task.operator
        act("Looking at the workspace.", "list_files", path=".")
        act("Reading the definition.", "read_file", path="reference.py")
        found = template(op)
        if found is None:
            return self._fallback()
        self.source, configs = found
        recommended = []
        if "search_knowledge" in self.tools:
            out, _ = act("Looking up starting configurations in the knowledge base.", "search_knowledge",
                         query=f"{op.replace('_', ' ')} starting configurations num warps")
            recommended = configs_from_knowledge(out, configs[0])
        order = choose_configs(configs, recommended, self.seed)
        swept = self._sweep(order)
        if self.measured:
            return self._measured_search(order, swept)
        correct = [r for r in swept if r.correct]
        default = self._incumbent(robust(correct))
        self._own_search(default, self._dispatch(default, correct) if default else {}, order[0])

    def _sweep(self, order: list[dict[str, Any]]) -> list[_Swept]:
        """Write the template and the test script, run the sweep, read its results."""
        act = self.s.act
        budget = [v for k, v in self.task.seconds.items() if k in ("tool", "gpu", "wall")]
        seconds = min(SWEEP_MAX_S, max(SWEEP_MIN_S, SWEEP_SHARE * min(budget))) if budget else SWEEP_MAX_S
        seconds = round(min(seconds, max(SWEEP_MIN_S, self.command_s - 120)))
        listed = order if self.task.gpu else order[:CPU_CONFIGS]
        extra = variants(self.task.shapes) if self.task.gpu else []  # interpreter timings cannot rank them
        act("Writing the parameterised kernel.", "write_file", path="template.py", content=self.source)
        act("Writing a test and search script.", "write_file", path="check.py",
            content=CHECK_SCRIPT.format(operator=self.task.operator, configs=json.dumps(listed), seconds=seconds,
                                        variants=json.dumps(extra)))
        out, _ = act(f"Searching {len(listed)} configurations for at most {seconds} s.", "bash",
                     command="python check.py sweep")
        swept = {}
        for m in re.finditer(r"^RESULT correct=(\d) (?:max_err=\S+ ms=(\S+) shapes_ms=(\[[^\]]*\])"
                             r"(?: variants_ms=(\[[^\]]*\]))?|error=\S+) config=(\d+)", out, re.M):
            i, ok = int(m.group(5)), m.group(1) == "1" and m.group(3) is not None
            if i < len(listed) and i not in swept:  # a crash reported after a partial line counts once
                swept[i] = _Swept(i, listed[i], ok, float(m.group(2)) if ok else None, json.loads(m.group(3)) if ok else [],
                                  json.loads(m.group(4)) if ok and m.group(4) else [])
        swept = list(swept.values())
        ok = [r for r in swept if r.correct]
        kept = robust(ok)
        best = self._incumbent(kept)
        fragile = [r.config for r in ok if r not in kept]
        self.sweep_note = (f"the sweep tried {len(swept)} of {len(listed)} configurations, {len(ok)} correct"
                           + (f", {len(extra)} variant shape(s) besides the public ones" if extra else "")
                           + (f"; {len(fragile)} left aside as more than {VARIANT_LOSS:.0%} slower than the best on "
                              f"a variant" if fragile else "")
                           + (f"; fastest {best.config} at {best.ms:.4g} ms" if best else ""))
        return swept

    @staticmethod
    def _incumbent(results: list[_Swept]) -> _Swept | None:
        """In the order tried, a faster one replaces the incumbent only beyond the margin."""
        best = None
        for r in results:
            if r.ms is not None and (best is None or r.ms < best.ms * (1 - MARGIN)):
                best = r
        return best

    def _dispatch(self, default: _Swept, correct: list[_Swept]) -> dict[str, dict[str, Any]]:
        """Public shapes on which another configuration beat the default beyond the margin."""
        table = {}
        for s, shape in enumerate(self.task.shapes):
            if s >= len(default.shapes_ms):
                continue
            best = min(correct, key=lambda r: r.shapes_ms[s] if s < len(r.shapes_ms) else math.inf)
            if best.config != default.config and best.shapes_ms[s] < default.shapes_ms[s] * (1 - MARGIN):
                table[shape_key(shape)] = best.config
        return table

    # -- goal-only: its own test decides -----------------------------------------------------
    def _own_search(self, default: _Swept | None, dispatch: dict[str, dict[str, Any]], first: dict[str, Any]) -> None:
        """The sweep's best configuration (the first one tried when none was correct), dispatching
        shapes to others when its own test confirms the dispatch pays."""
        act = self.s.act
        config = default.config if default else first
        final = render(self.source, config)
        if dispatch:
            special = render(self.source, config, dispatch)
            act(f"Writing the kernel: {config}, with {len(dispatch)} shape(s) dispatched to their own configuration.",
                "write_file", path="kernel.py", content=special)
            out, _ = act("Testing the dispatching kernel.", "bash", command="python check.py kernel.py")
            r = _checked(out)
            if r and dispatch_wins(r[1], default.shapes_ms):
                final = special
            else:
                act("The dispatch did not pay on re-measurement; writing the single configuration.",
                    "write_file", path="kernel.py", content=final)
                act("Testing the final kernel.", "bash", command="python check.py kernel.py")
        else:
            act(f"Writing the kernel with the best configuration ({self.sweep_note}).", "write_file",
                path="kernel.py", content=final)
            act("Testing the final kernel.", "bash", command="python check.py kernel.py")
        if "profile" in self.tools:
            act("Profiling the final kernel.", "profile")
        self._submit(final)

    # -- a harness measurement decides -------------------------------------------------------
    def _measured_search(self, order: list[dict[str, Any]], swept: list[_Swept]) -> None:
        """Candidates in the sweep's order of speed (then the untried, then those it found wrong), as
        many as the turns allow, each through the harness's tools; then the shape dispatch."""
        act = self.s.act
        correct = [r for r in swept if r.correct]
        kept = robust(correct)  # the robust ones first, each group by its public-shape time
        ranked = [r.config for r in sorted(correct, key=lambda r: (r not in kept, r.ms, order.index(r.config)))]
        tried = [r.config for r in swept]
        cands = ranked + [c for c in order if c not in tried] + [c for c in order if c in tried and c not in ranked]
        cands = cands[: self._fits(len(cands))]
        phase = "correct"
        if self.workflow:
            self._plan_phase(phase, cands[:1])
        scores: list[tuple[float | None, list]] = []
        for i, config in enumerate(cands):
            if self.workflow and phase == "correct" and self.kept:
                self._next_phase("a correct kernel is kept")
                phase = "optimise"
                self._plan_phase(phase, cands[i:])
            parent = cands[self._best(scores)] if scores else None  # each one changes the best so far
            scores.append(self._try(config, render(self.source, config), f"configuration {config}", parent))
            if i == 0 and "profile" in self.tools and scores[0][0] is not None:
                out, err = act("Profiling the first correct version.", "profile")
                if not err:  # the profile's diagnosis and its top recommendation rank the optimisation direction
                    report = json.loads(out)
                    self.diagnosis = report.get("diagnosis", [])
                    self.benefit = (report.get("recommendations") or [{}])[0].get("expected_benefit", "medium")
        best = self._best(scores)
        base = self.kept["config"] if self.workflow and self.kept else cands[best]
        written, final = render(self.source, cands[-1]), render(self.source, base)
        base_swept = next((r for r in correct if r.config == base), None)
        table = self._dispatch(base_swept, correct) if base_swept else {}
        if self.workflow:
            self._next_phase("every configuration in the turn budget was tried")
            self._plan_phase("specialise", [], note=(
                f"The sweep measured {len(table)} public shape(s) faster with another configuration: {table}" if table
                else "The sweep measured no public shape faster with another configuration"))
        if table:
            special = written = render(self.source, base, table)
            ms, shapes = self._try(base, special, f"shape dispatch over {base}: {table}", base, specialise=True)
            base_ms, base_shapes = scores[cands.index(base)]
            if self.workflow:
                final = self.kept["kernel"] if self.kept else final
            elif ms is not None and base_ms is not None and dispatch_wins(shapes, base_shapes) and (
                    not self.search or ms < base_ms * (1 - MARGIN)):
                final = special
        if self.workflow:
            self._next_phase("the shape dispatch is kept" if table and final == written else
                             "the shape dispatch did not beat the kept kernel" if table else
                             "no public shape justifies a dispatch")
        self._submit(final, restore=final != written)

    def _best(self, scores: list[tuple[float | None, list]]) -> int:
        """The candidate the harness keeps: in order, a faster one replaces only beyond the margin."""
        best = None
        for i, (ms, _) in enumerate(scores):
            if ms is not None and (best is None or ms < scores[best][0] * (1 - MARGIN)):
                best = i
        return best if best is not None else 0

    def _fits(self, n: int) -> int:
        """How many candidates the turn budget leaves room for (every model call is a turn), the
        shape dispatch's own candidate kept aside."""
        per = 1 + self.evaluate + self.search + 2 * self.workflow
        fixed = 2 + ("search_knowledge" in self.tools) + 3 + ("profile" in self.tools) + 15 * self.workflow + per
        tail = 6  # restore, submit; a review round, a test, a resubmit, a second review
        return max(min(n, 1 + self.workflow), min(n, (self.task.turns - fixed - tail) // per))

    # -- one kernel through every mechanism the harness has ---------------------------------
    def _try(self, config: dict[str, Any], kernel: str, what: str, parent: dict[str, Any] | None,
             specialise: bool = False) -> tuple[float | None, list]:
        """Write, evaluate, register, validate and decide one kernel (a configuration, or a dispatch
        over it); (ms, per-shape ms) as the harness measured them. `parent`: the configuration whose
        candidate this one changes."""
        act = self.s.act
        act(f"Trying {what}.", "write_file", path="kernel.py", content=kernel)
        ms, shapes, accepted = None, [], True
        if self.evaluate:
            out, _ = act(f"Evaluating {what}.", "evaluate")
            ms, shapes = _evaluated(out)
            accepted = ms is not None
        register = self.search and accepted and not (specialise and self.workflow)
        if register:  # a kernel the policy stands behind joins the lineage (the search promotes the best)
            out, _ = self._register(what, config, parent, specialise)
            if not self.workflow and not self.evaluate:
                ms, shapes = _measured(out)
        if self.workflow:
            out, err = act(f"Handing {what} to the workflow controller.", "workflow", action="advance")
            wms, wshapes = _workflow_measured(out) if not err else (None, [])
            ms, shapes = (wms, wshapes) if accepted else (None, [])
            kept = self.kept
            if ms is None:
                act("Rejecting it.", "workflow", action="decide", decision="reject",
                    reason=f"{what}: incorrect on the public shapes, failed to run, or rejected by the evaluator")
            elif kept is None or (not specialise and ms < kept["ms"] * (1 - MARGIN)) or (
                    specialise and dispatch_wins(shapes, kept["shapes_ms"])
                    and (not self.search or ms < kept["ms"] * (1 - MARGIN))):
                act("Keeping it.", "workflow", action="decide", decision="keep",
                    reason=f"{what}: correct and {ms:.4g} ms ({shapes} per shape), faster than the kept candidate")
                self.kept = {"kernel": kernel, "config": config, "ms": ms, "shapes_ms": shapes}
                if specialise and self.search:  # the lineage gets the dispatch the controller kept
                    self._register(what, config, parent, specialise)
            else:
                act("Not keeping it.", "workflow", action="decide", decision="revise",
                    reason=f"{what}: {ms:.4g} ms ({shapes} per shape), not measurably faster than the kept "
                           f"{kept['ms']:.4g} ms ({kept['shapes_ms']})")
        return ms, shapes

    def _register(self, what: str, config: dict[str, Any], parent: dict[str, Any] | None,
                  specialise: bool) -> tuple[str, bool]:
        """The candidate tool: a snapshot with its lineage (the search mechanism's ids: c1, c2, ...)."""
        out, err = self.s.act(f"Keeping {what} as a candidate.", "candidate", change=what,
                              parent=self.ids.get(json.dumps(parent), "") if parent is not None else "")
        try:
            cid = json.loads(out).get("id")
        except (json.JSONDecodeError, AttributeError):
            cid = None
        if cid and not specialise:
            self.ids[json.dumps(config)] = cid
        return out, err

    # -- workflow documents -----------------------------------------------------------------
    def _plan_phase(self, phase: str, configs: list[dict[str, Any]], note: str = "") -> None:
        act = self.s.act
        evidence = "; ".join(self.diagnosis[:2]) or self.sweep_note or "the first kernel's measurement"
        chunks = [configs[i:i + self.per_direction] for i in range(0, len(configs), self.per_direction)]
        rows = [f"| launch configurations ranked {i * self.per_direction + 2}-{i * self.per_direction + len(c) + 1} by "
                f"the sweep: {', '.join(map(str, c))} | {self.benefit} | low | {evidence} |" for i, c in enumerate(chunks)]
        directions = "\n".join(rows) or f"| none left in the template bank | low | low | {evidence} |"
        draft = (f"# Draft: {self.task.operator}, phase {phase}\n\n## Baseline\nThe template kernel at the "
                 f"configuration the sweep ranked first, validated by the controller on the public shapes; "
                 f"{self.sweep_note}.\n\n## Risks\nA configuration can be slower on shapes it was not measured on, "
                 f"or fail to compile.\n\n## Directions\n| direction | benefit | risk | evidence |\n|---|---|---|---|\n"
                 f"{directions}\n\n## Steps\n1. Write the configuration.\n2. Advance.\n\n## Validation\nThe "
                 f"controller's measurement on every public shape.{' ' + note + '.' if note else ''}\n\n## Evidence\n"
                 f"Keep a candidate only when it is correct and measurably faster (a dispatch: faster on some shape, "
                 f"slower on none).\n")
        act(f"Writing the {phase} draft.", "write_file", path="docs/draft.md", content=draft)
        act("Checking the draft.", "workflow", action="advance")
        plan = (f"# Plan: phase {phase}\n\n1. Implement one candidate at a time.\n2. Advance: the controller "
                f"validates and measures.\n3. Decide with the measurement.\n\n## Acceptance\nCorrect on every public "
                f"shape; kept only when faster beyond the noise.\n")
        act(f"Writing the {phase} plan.", "write_file", path="docs/plan.md", content=plan)
        act("Checking the plan.", "workflow", action="advance")

    def _next_phase(self, reason: str) -> None:
        self.s.act("Ending this phase.", "workflow", action="next_phase", reason=reason)

    def _fallback(self) -> None:
        """No template: the reference as a fallback (the evaluator rejects it as a passthrough)."""
        act = self.s.act
        act("No template for this operator; writing a fallback.", "write_file", path="kernel.py", content=PASSTHROUGH)
        if self.evaluate:
            act("Evaluating the fallback.", "evaluate")
        self._submit(PASSTHROUGH)

    def _submit(self, final: str, restore: bool = False) -> None:
        act = self.s.act
        if restore:
            act("Restoring the best kernel.", "write_file", path="kernel.py", content=final)
        for _ in range(3):
            out, err = act("Submitting.", "submit")
            if not err:
                return
            if "not tested after its last change" in out:  # the reviewer's objection: test the exact file
                if self.evaluate:
                    act("Testing the final kernel, as the reviewer asked.", "evaluate")
                elif self.source:
                    act("Testing the final kernel, as the reviewer asked.", "bash", command="python check.py kernel.py")
                elif self.search:
                    act("Measuring the final kernel, as the reviewer asked.", "candidate", change="the final kernel, re-measured")


def _geomean(times: list[float]) -> float | None:
    return math.exp(sum(math.log(t) for t in times) / len(times)) if times and all(t and t > 0 for t in times) else None


def _evaluated(output: str) -> tuple[float | None, list]:
    try:
        result = json.loads(output)
    except json.JSONDecodeError:
        return None, []
    times = [s["time_ms"]["median"] for s in result.get("shapes", []) if s.get("time_ms")]
    if result.get("verdict") != "accepted" or not times:
        return None, []
    return _geomean(times), times


def _checked(output: str) -> tuple[float, list] | None:
    """(ms, per-shape ms) of a correct kernel from `python check.py kernel.py`, else None."""
    m = re.search(r"^RESULT correct=(\d) max_err=\S+ ms=(\S+) shapes_ms=(\[[^\]]*\])\s*$", output, re.M)
    return (float(m.group(2)), json.loads(m.group(3))) if m and m.group(1) == "1" else None


def _measured(output: str) -> tuple[float | None, list]:
    try:
        ev = json.loads(output).get("evidence") or {}
    except (json.JSONDecodeError, AttributeError):
        return None, []
    return (ev.get("ms"), [s.get("ms") for s in ev.get("shapes") or []]) if ev.get("correct") else (None, [])


def _workflow_measured(output: str) -> tuple[float | None, list]:
    m = re.search(r'validated and measured: (\{.*\})\. Next', json.loads(output).get("result", ""), re.S)
    if not m:
        return None, []
    r = json.loads(m.group(1))
    return (r.get("ms"), [s.get("ms") for s in r.get("shapes") or []]) if r.get("correct") else (None, [])
