"""Hydra's entry point for the tuning experiment (``python train.py -m experiment=tune model=<m> dataset=<d>``).

Hydra instantiates sweepers only from the ``hydra_plugins`` package; the study itself is :mod:`mnp.tune.study`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("mnp")


class TuneSweeper(Sweeper):
    """Cross-validated Optuna study of one model on one dataset; settings as in :class:`mnp.tune.study.TuneSettings`."""

    def __init__(
        self, space: Any = None, parallel_folds: bool = False, seed_check: Any = None, **settings: Any
    ) -> None:
        from mnp.tune.seedcheck import SeedCheck
        from mnp.tune.study import TuneSettings

        self.space = _plain(space) or {}
        self.parallel_folds = bool(parallel_folds)
        self.settings = TuneSettings(**settings, seed_check=SeedCheck(**(_plain(seed_check) or {})))
        self.job_idx = 0

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        from mnp.tune.study import Study

        space, fixed = dict(self.space), []
        for override in OverridesParser.create().parse_overrides(arguments):
            if override.is_sweep_override():  # a range on the command line joins the declared space
                space[override.get_key_element()] = override.input_line.partition("=")[2]
            else:
                fixed.append(override.input_line)
        cfg = self.config
        model, dataset = cfg.hydra.runtime.choices.get("model"), cfg.hydra.runtime.choices.get("dataset")
        study = Study(
            self.settings,
            space,
            Path(cfg.hydra.sweep.dir),
            model,
            dataset,
            fixed=[*fixed, f"dataset.cv_folds={self.settings.folds}"],
            defaults={k: _plain(OmegaConf.select(cfg, k, default=None)) for k in space},
            base_epochs=OmegaConf.select(cfg, "trainer.max_epochs", default=None),
            train_seed=int(cfg.seed),
        )
        print(
            f"Study {study.name} in {study.sweep_dir} ({self.settings.n_trials} trials of {self.settings.folds} folds)",
            flush=True,
        )
        study.run(self._launch, parallel_folds=self.parallel_folds)
        print(f"Study {study.name}: records in {study.sweep_dir / 'trials.csv'} and best.yaml", flush=True)

    def _launch(self, batch):
        """Run the fold jobs; each gives its objective value, or the exception it failed with."""
        returns = self.launcher.launch([list(b) for b in batch], initial_job_idx=self.job_idx)
        self.job_idx += len(returns)
        return [r._return_value for r in returns]  # a failed job's is its exception


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
