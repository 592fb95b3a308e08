"""The scripted policy: a deterministic, non-LLM agent, the offline default and a control arm. It
answers as a model (the model registry's "scripted" provider, ``+model=scripted``: ScriptedModel)
and, behind the model gateway, in an external agent's own tools (ScriptedAgent).

Policy "kernel-search": read the task, take the operator's parameterised Triton template
(``templates/<operator>.py``, outside every agent workspace) and search its configurations with
the tools the harness gives it:
- search (every arm: the shell is a core tool): writes the template and its own test script
  (harnesses/scripts/check.py, as ``check.py``) and runs a sweep of the template's configurations
  in one command, each judged on every public shape against reference.py and timed, within a share
  of the trial's time budget (SWEEP_SHARE, at most SWEEP_MAX_S); the seed orders the configurations
  after the recommended ones and the template's default; on a GPU it also checks and times them on
  variant shapes (``variants``: each public shape's innermost dimension halved) and leaves aside a
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
"Measurably faster" is the harness's own rule (mechanisms/_measure.improves, its MARGIN).

    _model     ScriptedModel: the model interface, the reviewer, the "actions" policy
    _policy    the kernel-search plan, replayed from the start on every turn
    _tools     each mechanism's tool use, and the reading of the tools' answers
    _configs   templates, their rendering, the order of the sweep, the test script
    _gateway   ScriptedAgent: the same policy, short, in an external agent's tools
"""
from ablate.harnesses.scripted._configs import (PASSTHROUGH, TEMPLATES, VARIANT_LOSS, check_script, choose_configs,
                                                configs_from_knowledge, dispatch_wins, render, robust, shape_key,
                                                template, variants)
from ablate.harnesses.scripted._gateway import ScriptedAgent
from ablate.harnesses.scripted._model import POLICIES, ScriptedModel, review
from ablate.harnesses.scripted._policy import SWEEP_MAX_S, SWEEP_MIN_S, SWEEP_SHARE, read_task

__all__ = ["PASSTHROUGH", "POLICIES", "SWEEP_MAX_S", "SWEEP_MIN_S", "SWEEP_SHARE", "TEMPLATES", "VARIANT_LOSS",
           "ScriptedAgent", "ScriptedModel", "check_script", "choose_configs", "configs_from_knowledge",
           "dispatch_wins", "read_task", "render", "review", "robust", "shape_key", "template", "variants"]
