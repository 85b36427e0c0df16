"""Noise protocol and OOD assembly (docs/method.md §5)."""

import json
import math
import os
import re
from itertools import combinations

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from cfg_utils import compose_train
from cli_utils import run_cli

from baselines.deep_ensemble import DeepEnsemble
from datamodules import TensorDataModule
from datamodules.cifar10c import ood_mix
from mnp.cli.validate import ConfigError, resolve_auto, validate
from mnp.eval import protocols
from mnp.eval.eval_protocol import EvalProtocol


@pytest.mark.parametrize("m,count", [(6, 20), (3, 3), (2, 2), (1, 0)])
def test_noise_subsets_enumerate(m, count):
    # handwritten (6 views) -> C(6,3)=20, pie/scene15 (3) -> 3, cub (2) -> 2
    subsets = protocols.noise_subsets(m)
    assert len(subsets) == count
    assert all(len(s) == m // 2 for s in subsets)
    assert len(set(subsets)) == count


def test_the_cap_keeps_every_subset_of_the_paper_datasets():
    """Handwritten's C(6, 3) = 20 is the most any real dataset has: all kept, in the order as before."""
    assert protocols.DEFAULT_MAX_SUBSETS >= 20
    for m in (6, 3, 2):
        assert protocols.noise_subsets(m, max_subsets=protocols.DEFAULT_MAX_SUBSETS, seed=5) == list(
            combinations(range(m), m // 2)
        )


@pytest.mark.parametrize("m", [8, 40, 60, 200])
def test_many_views_draw_at_most_the_cap_without_enumerating(m):
    """C(60, 30) ≈ 1.2e17 and C(200, 100) ≈ 9e58 subsets: 64 distinct ones are drawn, never the full list;
    the draw depends on the seed alone."""
    subsets = protocols.noise_subsets(m, max_subsets=64, seed=0)
    assert len(subsets) == 64 == len(set(subsets)) and subsets == sorted(subsets)
    assert all(len(s) == m // 2 and list(s) == sorted(set(s)) and 0 <= s[0] and s[-1] < m for s in subsets)
    assert protocols.noise_subsets(m, max_subsets=64, seed=0) == subsets
    assert protocols.noise_subsets(m, max_subsets=64, seed=1) != subsets
    assert len(protocols.noise_subsets(m, size=1, max_subsets=64, seed=0)) == min(m, 64)


def test_unrank_subset_is_the_lexicographic_order():
    for n in range(1, 8):
        for k in range(1, n + 1):
            assert [protocols.unrank_subset(r, n, k) for r in range(math.comb(n, k))] == list(combinations(range(n), k))


def test_bad_subset_size_and_cap_name_their_keys():
    with pytest.raises(
        ValueError, match=r"^eval\.noise_subset_size must lie in \[1, 2\] \(the data has 2 views\), got 5$"
    ):
        DeepEnsemble(3, [2, 2]).configure_evaluation(EvalProtocol(noise_subset_size=5))
    for bad in (0, -1, 2.5, True, 1025):
        with pytest.raises(ValueError, match=r"^eval\.noise_max_subsets must be an integer in \[1, 1024\], got"):
            EvalProtocol(noise_max_subsets=bad)


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "null", "1025", "100000000"])
def test_validation_rejects_a_bad_noise_max_subsets(tmp_path, value):
    """N86 (1025, 10^8): unbounded, 10^8 subsets took 11 min and 5 GB before training."""
    cfg = compose_train(tmp_path, ["model=mlp", "dataset=handwritten", f"eval.noise_max_subsets={value}"])
    with pytest.raises(ConfigError, match=r"^eval\.noise_max_subsets must be an integer in \[1, 1024\]"):
        validate(cfg)


def train_forty_views(tmp_path, *overrides) -> dict:
    """train.py on a custom file of 40 views of 2 columns, in a child under a 5 GB address-space limit, so a
    regression fails with a MemoryError instead of exhausting the machine; its metrics, once its peak resident
    memory is checked to be below 3 GB."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 30)
    path = tmp_path / "forty.npz"
    np.savez(path, **{f"x{v + 1}": rng.normal(size=(len(y), 2)) + y[:, None] for v in range(40)}, y=y)
    run_dir, rss = tmp_path / "run", tmp_path / "maxrss_kb"
    limit = 5 << 30  # the child's address space; its peak resident memory is written to ``rss`` at exit
    child = (
        f"import atexit, resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit})); "
        f"atexit.register(lambda: open({str(rss)!r}, 'w').write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))); "
        "sys.argv = ['train.py'] + sys.argv[1:]; runpy.run_path('train.py', run_name='__main__')"
    )
    r = run_cli(
        [
            "-c",
            child,
            "trainer.max_epochs=2",
            "dataset=custom",
            f"dataset.path={path}",
            "logger=none",
            "eval.noise_levels=[0.5,2.0]",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ]
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(rss.read_text()) < 3 << 20, f"peak resident memory {int(rss.read_text()) / 2**20:.1f} GB"
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.mark.slow
def test_forty_views_train_and_test_in_little_memory(tmp_path):
    """C(40, 20) ≈ 1.4e11 subsets used to be listed before training (the process grew until the kernel killed it)."""
    metrics = train_forty_views(tmp_path, "model=mlp")
    assert metrics["noise/n_subsets"] == 64 and 0 <= metrics["noise/acc_mean"] <= 1


@pytest.mark.slow
def test_forty_views_train_mnp_with_the_modality_mask_in_little_memory(tmp_path):
    """MNP's modality mask drew from the table of all 2^40 subsets of >= 2 views, built before training; it now
    draws a subset size, then the views, beyond 12 views (mnp.model.aggregation.random_modality_mask)."""
    metrics = train_forty_views(
        tmp_path,
        "model=mnp",
        "model.aggregation.modality_mask=true",
        "model.encoder.d_e=16",
        "model.warmup.epochs=1",
        "model.decoder.num_samples=2",
        "model.memory.size=30",
    )
    assert metrics["epochs"] == 2 and 0 <= metrics["test/acc"] <= 1 and math.isfinite(metrics["test/nll"])


def test_default_noise_levels():
    levels = protocols.default_noise_levels()
    assert len(levels) == 10 and levels[0] == pytest.approx(0.01) and levels[-1] == pytest.approx(10.0)
    assert np.allclose(np.diff(np.log10(levels)), 1 / 3)


def test_add_noise_only_touches_subset_and_is_reproducible():
    views = [torch.zeros(1000, 3), torch.zeros(1000, 4), torch.zeros(1000, 2)]
    g1 = protocols.noise_generator(torch.device("cpu"), seed=1, batch_idx=0)
    noisy = protocols.add_noise(views, (0, 2), 2.0, g1)
    assert torch.equal(noisy[1], views[1])
    assert noisy[0].std().item() == pytest.approx(2.0, rel=0.05)
    g2 = protocols.noise_generator(torch.device("cpu"), seed=1, batch_idx=0)
    assert torch.equal(protocols.add_noise(views, (0, 2), 2.0, g2)[0], noisy[0])


def test_ood_mix_without_replacement():
    id_views = [torch.arange(20.0)[:, None]]
    ood_views = [100 + torch.arange(30.0)[:, None]]
    views, is_ood = ood_mix(id_views, ood_views, 10, 25, torch.Generator().manual_seed(0))
    ids, oods = views[0][is_ood == 0, 0], views[0][is_ood == 1, 0]
    assert len(ids) == 10 and len(oods) == 25
    assert len(set(ids.tolist())) == 10 and len(set(oods.tolist())) == 25  # no duplicates
    assert ids.max() < 100 <= oods.min()


# ---------------------------------------------------------------------------- eval.noise_batch_rows
def test_noisy_copies_are_the_per_subset_draws_stacked():
    views = [torch.randn(7, d, generator=torch.Generator().manual_seed(d)) for d in (3, 4, 2)]
    subsets, levels = protocols.noise_subsets(3), [0.1, 1.0, 5.0]
    g = protocols.noise_generator(torch.device("cpu"), seed=3, batch_idx=2)
    one_by_one = [protocols.add_noise(views, s, sigma, g) for sigma in levels for s in subsets]
    g = protocols.noise_generator(torch.device("cpu"), seed=3, batch_idx=2)
    copies = list(protocols.noisy_copies(views, subsets, levels, g))
    assert len(copies) == len(levels) * len(subsets) == len(one_by_one)
    for lazy, eager in zip(copies, one_by_one):
        assert all(torch.equal(a, b) for a, b in zip(lazy, eager))


def test_predict_in_chunks_calls_at_most_max_rows():
    rows = []

    def predict(views):
        rows.append(views[0].shape[0])
        return views[0].softmax(-1)[None].expand(2, -1, -1), views[0][:, 0]

    x = torch.randn(23, 4)
    out = protocols.predict_in_chunks(predict, [[x]], 10)
    assert rows == [10, 10, 3] and torch.allclose(out, x.softmax(-1))
    rows.clear()  # copies of 7 rows: a call spans copies, a copy spans calls, and rows keep their order
    parts = [[torch.randn(7, 4), torch.randn(7, 2)] for _ in range(3)]
    out = protocols.predict_in_chunks(predict, iter(parts), 10)
    assert rows == [10, 10, 1] and torch.equal(out, torch.cat([p[0] for p in parts]).softmax(-1))


def test_auto_is_one_call_per_subset_on_the_cpu():
    assert protocols.resolve_noise_batch_rows("auto", torch.device("cpu")) == 0
    assert protocols.resolve_noise_batch_rows("auto", torch.device("cuda")) == 65536
    assert protocols.resolve_noise_batch_rows(0, torch.device("cuda")) == 0
    assert protocols.resolve_noise_batch_rows(5, torch.device("cpu")) == 5


def noisy_metrics(model, dm, rows):
    model.configure_evaluation(EvalProtocol(noise_levels=(0.1, 1.0, 3.0), noise_batch_rows=rows))
    pl.Trainer(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    ).test(model, dm, verbose=False)
    return {k: v for k, v in model.test_results.items() if not k.startswith("time/")}


@pytest.mark.parametrize("fusion", ["early", "late"])
def test_a_deterministic_model_gives_the_same_noisy_metrics_batched(fusion, one_thread):
    """4 views (6 subsets) × 3 levels = 18 copies of each test batch (37 rows, then 15); 50 rows per call
    splits (σ, subset) blocks across calls."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    dm = TensorDataModule(
        [rng.normal(size=(200, d)) + y[:, None] for d in (3, 5, 2, 4)],
        y,
        np.arange(148),
        np.arange(148, 200),
        eval_batch_size=37,
    )
    torch.manual_seed(0)
    model = DeepEnsemble(3, [3, 5, 2, 4], fusion=fusion, members=3, hidden=(16,))
    base = noisy_metrics(model, dm, 0)
    assert "noise/acc@1" in base and "noise/ece_mean" in base
    for rows in (50, 65536):
        batched = noisy_metrics(model, dm, rows)
        assert batched.keys() == base.keys()
        assert all(batched[k] == pytest.approx(base[k], abs=1e-6) for k in base), (rows, batched, base)


@pytest.mark.slow
def test_mnp_noisy_accuracy_batched_matches_one_call_per_subset(real_file, one_thread):
    """MNP samples its decoder from ``sample_generator``: batched, the draws are laid out differently, so
    the noisy accuracy agrees statistically (within 1.5 points), not bit for bit."""
    real_file("handwritten", "handwritten_6views.mat")
    from mnp_utils import flat_mnp

    from datamodules.features import FeatureDataModule

    pl.seed_everything(0, verbose=False)
    dm = FeatureDataModule("handwritten", os.environ["MNP_DATA_DIR"], download=False, batch_size=200)
    dm.setup()
    model = flat_mnp(
        num_classes=dm.num_classes,
        view_dims=dm.view_dims,
        d_e=32,
        memory_size=100,
        tau=0.25,
        num_samples=3,
        optim={"lr": 3e-3},
    )
    pl.Trainer(
        max_epochs=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    ).fit(model, dm)
    base, batched = noisy_metrics(model, dm, 0), noisy_metrics(model, dm, 65536)
    assert base["test/acc"] == batched["test/acc"] and base["test/acc"] > 0.7
    assert abs(batched["noise/acc_mean"] - base["noise/acc_mean"]) < 0.015, (batched, base)
    assert all(abs(batched[k] - base[k]) < 0.015 for k in base if k.startswith("noise/acc@")), (batched, base)


@pytest.mark.parametrize("value", ["-1", "many", "1.5", "true"])
def test_validation_rejects_a_bad_noise_batch_rows(tmp_path, value):
    cfg = compose_train(tmp_path, ["model=mnp", "dataset=handwritten", f"eval.noise_batch_rows={value}"])
    resolve_auto(cfg)
    with pytest.raises(ConfigError, match=rf"^{re.escape('eval.noise_batch_rows must be auto or an integer >= 0')}"):
        validate(cfg)
    with pytest.raises(ValueError, match="eval.noise_batch_rows"):
        EvalProtocol(noise_batch_rows=cfg.eval.noise_batch_rows)


@pytest.mark.parametrize("value", ["auto", "0", "65536"])
def test_validation_accepts_auto_and_counts(tmp_path, value):
    cfg = compose_train(tmp_path, ["model=mnp", "dataset=handwritten", f"eval.noise_batch_rows={value}"])
    resolve_auto(cfg)
    validate(cfg)
