"""Compose the project's Hydra configs in tests (no Hydra run directory)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

CONF = str(Path(__file__).resolve().parents[1] / "conf")
ROOT = Path(__file__).resolve().parents[1]


def compose_train(out_dir, overrides=(), config_name: str = "train"):
    """Compose ``train.yaml`` with the output dir set and no logger, as a test job would run."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(
            config_name,
            overrides=[f"paths.output_dir={out_dir}", "logger=none", "trainer.enable_progress_bar=false", *overrides],
            return_hydra_config=False,
        )
