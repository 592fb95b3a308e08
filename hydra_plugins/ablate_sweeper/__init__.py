"""Hydra sweeper for `python -m ablate -m ...`: every job is one trial.

Each point of the user's sweep (`+harness=goal_only,kda05`, or none) is composed and planned into
its trials; the trials not yet stored become one job each (`+trial=<trial id>`), handed to the
launcher in batches of `max_batch_size`. With `hydra/launcher=slurm` a batch is one SLURM job
array. Hydra finds plugins only in the `hydra_plugins` package, so this thin class lives here; the
planning is ablate.runner's.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from omegaconf import OmegaConf

log = logging.getLogger(__name__)


class TrialSweeper(BasicSweeper):
    def sweep(self, arguments: list[str]) -> Any:
        from ablate import runner
        from ablate.errors import AblateError

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides(self._parse_config() + list(arguments))
        points = [p for batch in self.split_arguments(overrides, None) for p in batch]
        jobs, studies = [], {}
        try:
            for point in points:
                cfg = runner.config_dict(self.hydra_context.config_loader.load_sweep_config(self.config, list(point)))
                specs, todo = runner.pending(cfg, cfg["store"], log=log.info)
                runner.preflight(todo)
                if specs:
                    studies[Path(cfg["store"]) / specs[0].study] = cfg
                log.info("%s: %d trials, %d to run", " ".join(point) or "(no overrides)", len(specs), len(todo))
                jobs += [[*point, "+trial='" + s.trial_id.replace("'", "\\'") + "'"] for s in todo]
        except AblateError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        self.overrides = list(self.split_overrides_to_chunks(jobs, self.max_batch_size)) if jobs else []
        returns, failed, first = [], [], 0
        while not self.is_done():
            batch = self.get_job_batch()
            results = self.launcher.launch(batch, initial_job_idx=first)
            first += len(batch)
            returns.append(results)
            failed += [(job[-1], r._return_value) for job, r in zip(batch, results) if r.status == JobStatus.FAILED]
        for study_dir, cfg in studies.items():
            runner.print_report(study_dir, cfg)
        if failed:
            trial, exc = failed[0]
            print(f"error: {len(failed)} of {len(jobs)} trial jobs failed (first: {trial}: {exc}); rerun the same "
                  "command to retry them", file=sys.stderr)
            sys.exit(1)
        return returns
