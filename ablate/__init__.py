"""ablate: a controlled ablation benchmark for AI agents that write GPU kernels.

The engine: the CLI (`python -m ablate`), the runner and trial, the record store, the model
providers (`ablate.models`), the agent's sandbox (`ablate.sandbox`) and the trusted evaluator
(`ablate.evaluate`). See docs/design.md for the flow.
"""

__version__ = "0.1.0"
