"""`python -m ablate [+harness=H] [+model=M] [operators=SET] [study=S] ...` (Hydra).

`--help` is conf/hydra/help/ablate.yaml. Every override's key is checked against the schemas before
Hydra composes (ablate.config.check_overrides): one line naming the unknown key and the valid ones.
`dry_run=true` prints the plan (ablate.dry_run) and runs nothing. A study ends with its tables and
the path of its report (runner.print_report).

`+trial=<trial id>` runs that one trial of the study. Multirun (`-m`) makes every job one trial
this way (hydra_plugins/ablate_sweeper); a job raises its errors instead of exiting, so that the
launcher (submitit, SLURM) records them and the sweep reports them.
"""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

import ablate.config  # noqa: F401 - registers the config schemas Hydra composes against
from ablate.errors import AblateError


@hydra.main(version_base="1.3", config_path="pkg://ablate.conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from ablate import runner

    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    trial = str(cfg.trial) if cfg.get("trial") else None
    if trial and HydraConfig.get().mode == RunMode.MULTIRUN:  # a sweep's job: errors go to the launcher
        resolved = runner.config_dict(cfg)
        runner.run_study(resolved, resolved["store"], only=trial)
        return
    study_dir = None
    try:
        resolved = runner.config_dict(cfg)
        if resolved.get("dry_run"):
            from ablate import dry_run

            print(dry_run.text(resolved))
            return
        study_dir = f"{resolved['store']}/{resolved['study']['name']}"
        try:
            paths = runner.run_study(resolved, resolved["store"], only=trial)
        except runner.TrialsFailed as e:  # the others ran: their tables, then what failed
            runner.print_report(study_dir, resolved, e.paths)
            raise
        runner.print_report(study_dir, resolved, paths)
    except KeyboardInterrupt:  # Ctrl-C: what ended is stored, the trial cut short is kept; say so in one line
        if study_dir is None:
            print("interrupted before any trial started", file=sys.stderr)
        else:
            from ablate.store import Store

            stored = len(Store(resolved["store"]).scan(resolved["study"]["name"])[0])
            print(f"interrupted: {stored} trial(s) of this study stored in {study_dir}, "
                  f"a trial cut short is kept under {study_dir}/.incomplete; the same command resumes", file=sys.stderr)
        sys.exit(130)
    except AblateError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1 if isinstance(e, runner.TrialsFailed) else 2)
    except Exception as e:  # noqa: BLE001
        from omegaconf.errors import MissingMandatoryValue

        if isinstance(e, MissingMandatoryValue):
            print(f"error: missing value: {e.full_key} must be set (e.g. {e.full_key}=...)", file=sys.stderr)
            sys.exit(2)
        raise


def check_command_line(argv: list[str]) -> None:
    """Before Hydra composes: every override's key exists (`+` or not), and a dry run is not a sweep.
    Exits 2 with one line; what Hydra checks itself (group options, syntax) is left to it."""
    from hydra._internal.utils import get_args_parser
    from hydra.errors import HydraException

    try:
        args = get_args_parser().parse_args(argv)
    except SystemExit:  # Hydra's own parser will say what is wrong
        return
    if args.help or args.hydra_help:
        return
    try:
        ablate.config.check_overrides(args.overrides)
    except HydraException:  # a syntax error: Hydra's parser says where
        return
    except AblateError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if args.multirun and any(o.replace(" ", "").lower() in ("dry_run=true", "+dry_run=true") for o in args.overrides):
        print("error: dry_run=true plans one run and launches nothing; drop -m (one dry run per point of the sweep)",
              file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    check_command_line(sys.argv[1:])
    main()
