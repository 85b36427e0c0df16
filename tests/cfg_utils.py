"""Compose the project's Hydra configs in tests (no Hydra run directory)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

CONF = str(Path(__file__).resolve().parents[1] / "conf")
ROOT = Path(__file__).resolve().parents[1]
# two-view two moons and a small MNP with the warm-up, the memory update and the noise protocol all active
TINY_MNP = [
    "model=mnp",
    "dataset.num_views=2",
    "dataset.n_train=200",
    "dataset.n_test=100",
    "model.encoder.d_e=16",
    "model.encoder.resmlp_depth=1",
    "model.memory.size=20",
    "model.warmup.epochs=1",
    "model.decoder.num_samples=3",
    "eval.noise_levels=[0.1,1.0]",
    "skip_if_done=false",
]


def compose_train(out_dir, overrides=(), config_name: str = "train"):
    """Compose ``train.yaml`` with the output dir set and no logger, as a test job would run."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(
            config_name,
            overrides=[f"paths.output_dir={out_dir}", "logger=none", "trainer.enable_progress_bar=false", *overrides],
            return_hydra_config=False,
        )


def evaluate_config(ckpt_path, output_dir, evaluation: dict):
    """The config evaluate.py builds for ``ckpt_path`` with ``+eval.*`` settings, on the CPU, output in ``output_dir``."""
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "ckpt_path": str(ckpt_path),
            "output_dir": str(output_dir),
            "data_dir": None,
            "eval": dict(evaluation),
            "trainer": {"accelerator": "cpu", "devices": 1},
        }
    )
