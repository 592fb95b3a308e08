"""`python -m ablate [+harness=H] [+model=M] [operators=SET] [study=S] ...` (Hydra)."""
from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

import ablate.config  # noqa: F401 - registers the config schemas Hydra composes against
from ablate.errors import AblateError


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from ablate.runner import run_study
    from analysis import report

    try:
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        store = Path(hydra.utils.to_absolute_path(resolved["store"]))
        paths = run_study(resolved, store)
        study_dir = store / resolved["study"]["name"]
        if paths or study_dir.exists():
            print(report.text(study_dir, baseline=resolved["study"].get("baseline_arm"),
                              rejected_as=resolved["analysis"]["rejected_as"]))
    except AblateError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # noqa: BLE001
        from omegaconf.errors import MissingMandatoryValue

        if isinstance(e, MissingMandatoryValue):
            print(f"error: missing value: {e.full_key} must be set (e.g. {e.full_key}=...)", file=sys.stderr)
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
