"""`python -m ablate [+harness=H] [+model=M] [operators=SET] [study=S] ...` (Hydra).

Multirun (`-m`) makes every job one trial (hydra_plugins/ablate_sweeper), which the job names
with `+trial=<trial id>`: such a run runs that trial alone and raises instead of exiting, so the
launcher (submitit, SLURM) records the failure.
"""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from ablate.errors import AblateError


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from ablate import runner

    trial = cfg.get("trial")
    if trial:  # one job of a sweep: errors go to the launcher, which reports them
        resolved = runner.config_dict(cfg)
        runner.run_study(resolved, resolved["store"], only=str(trial))
        return
    try:
        resolved = runner.config_dict(cfg)
        study_dir = f"{resolved['store']}/{resolved['study']['name']}"
        try:
            paths = runner.run_study(resolved, resolved["store"])
        except runner.TrialsFailed as e:  # the others ran: their tables, then what failed
            runner.print_report(study_dir, resolved, e.paths)
            raise
        runner.print_report(study_dir, resolved, paths)
    except AblateError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1 if isinstance(e, runner.TrialsFailed) else 2)
    except Exception as e:  # noqa: BLE001
        from omegaconf.errors import MissingMandatoryValue

        if isinstance(e, MissingMandatoryValue):
            print(f"error: missing value: {e.full_key} must be set (e.g. {e.full_key}=...)", file=sys.stderr)
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
