"""Shared pytest fixtures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from mnp.cli.resolvers import register_resolver

register_resolver()  # the configs' resolvers, for tests that compose and resolve configs (train.py registers them)


@pytest.fixture
def one_thread():
    """Run a test with one intra-op thread (small models on this shared 2-core machine), then restore."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def no_full_error(monkeypatch, one_thread):
    """One intra-op thread and no ``HYDRA_FULL_ERROR``: the CLI guard's one-line errors as a user sees them
    (the bad-input tests: ``pytestmark = pytest.mark.usefixtures("no_full_error")``)."""
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)


# ---------------------------------------------------------------------------- data
def data_missing(reason: str) -> None:
    """Skip a test whose real data file is absent, but fail under CI (``CI`` set), where it must be there."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so the real data must be present: MNP_DATA_DIR=../shared/data)")
    pytest.skip(reason)


def data_dir() -> Path | None:
    root = os.environ.get("MNP_DATA_DIR")
    return Path(root) if root else None


@pytest.fixture
def real_file():
    """``real_file(dataset, name)``: the path of a real data file under $MNP_DATA_DIR, else skip (fail under CI)."""

    def get(dataset: str, name: str) -> Path:
        root = data_dir()
        if root is None:
            data_missing("MNP_DATA_DIR is not set (e.g. MNP_DATA_DIR=../shared/data)")
        path = root / dataset / name
        if not path.is_file():
            data_missing(f"{name} is not in {path.parent}/")
        return path

    return get


@pytest.fixture
def tiny_views():
    """A small separable 3-class, 2-view problem: views (36×5, 36×3), labels 0..2 (12 per class)."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 12)
    views = [rng.normal(size=(36, d)) + 3.0 * y[:, None] for d in (5, 3)]
    return views, y


# ---------------------------------------------------------------------------- report records
# the runs python -m mnp.tools.report reads (tests/test_report.py, tests/test_report_jobs.py,
# tests/test_report_paper.py)
SIGMAS = [0.01, 0.1, 1.0, 10.0]


def write_run(
    root: Path,
    exp: str,
    model: str,
    dataset: str,
    seed: int,
    acc: float,
    ece: float,
    variant=None,
    extra: dict | None = None,
    predictions: bool = False,
) -> Path:
    d = root / exp / "multiruns" / f"{model}_{dataset}_{variant}_s{seed}"
    d.mkdir(parents=True)
    m = {
        "model": model,
        "dataset": dataset,
        "seed": seed,
        "epochs": 3,
        "experiment": exp,
        "test/acc": acc,
        "test/ece": ece,
        "noise/acc_mean": acc - 0.1,
        "time/train_epoch_s": 1.0 + seed,
        "time/test_s": 0.5,
    }
    m.update({f"noise/acc@{s:.4g}": acc - 0.01 * i for i, s in enumerate(SIGMAS)})
    m.update(extra or {})
    (d / "metrics.json").write_text(json.dumps(m))
    cfg = f"experiment_name: {exp}\nseed: {seed}\nmodel:\n  memory_size: 7\n"
    if variant is not None:
        cfg += f"variant: {variant}\n"
    (d / "config.yaml").write_text(cfg)
    if predictions:
        rng = np.random.default_rng(seed)
        probs = rng.dirichlet(np.ones(3), 60).astype(np.float32)
        np.savez(
            d / "predictions.npz",
            **{
                "test/probs": probs,
                "test/labels": rng.integers(0, 3, 60),
                "test/uncertainty": rng.random(60),
                "ood/svhn/uncertainty": np.r_[rng.random(60), 1 + rng.random(40)],
                "ood/svhn/is_ood": np.r_[np.zeros(60), np.ones(40)].astype(np.int64),
                "ood/svhn/probs": rng.dirichlet(np.ones(3), 100),
            },
        )
    return d


@pytest.fixture
def sweep(tmp_path):
    """paper_main-like runs: 3 models × 2 datasets; known accuracies per seed."""
    root = tmp_path / "logs"
    accs = {
        ("mnp", "pie"): [0.95, 0.96, 0.97],
        ("mgp", "pie"): [0.90, 0.92],
        ("mcd", "pie"): [0.92, 0.92, 0.92],
        ("mnp", "cub"): [0.80, 0.82],
        ("mgp", "cub"): [0.85, 0.87],
        ("mcd", "cub"): [0.70, 0.70],
    }
    eces = {
        ("mnp", "pie"): 0.04,
        ("mgp", "pie"): 0.08,
        ("mcd", "pie"): 0.02,
        ("mnp", "cub"): 0.05,
        ("mgp", "cub"): 0.03,
        ("mcd", "cub"): 0.20,
    }
    for (m, d), vals in accs.items():
        for s, a in enumerate(vals):
            write_run(root, "paper_main", m, d, s, a, eces[(m, d)], predictions=(d == "pie" and s < 2))
    return root
