"""Speed benchmark of MNP against MGP and an MLP floor (docs/method.md §5, the paper's Table 5).

    python -m mnp.bench [--dataset NAME ...] [--json PATH] [--threads 1] [--quick]
                        [--models mnp mnp_ref mgp mlp] [--scaling] [--profile] [--sweep]

Cases: the real handwritten, cub, pie and scene15 (``$MNP_DATA_DIR``; skipped when absent) and
synthetic data with the shapes of caltech101 (2 × 4096, K = 101, N = 8677), hmdb (2 × 1000, K = 51,
N = 6718) and cifar10c (3 × 2048, K = 10, N = 50000): class-clustered Gaussians, 80/20 split.
Every model is built from its per-dataset config (``conf/model_dataset/<model>_<dataset>.yaml``).

* **Training**: one epoch = a Lightning ``fit`` pass over the training set in batches of 200, through
  the model's own ``training_step`` (MNP: manual optimisation; its main stage, i.e. with
  ``warmup_epochs=0``; the warm-up stage only trains the projection on L_RBF). For the synthetic
  shapes (and every dataset under ``--quick``) an epoch is bounded to ``--max-batches`` batches and
  extrapolated to the full epoch (the output says so).
* **Test**: the clean test set through ``predict`` in batches of 1000 (no noise protocol), with
  ``--max-test-rows`` rows at most, extrapolated to the full test set: linearly in rows, except that
  MNP's context encoding (computed once per pass and cached between its batches) is counted once:
  full = cold pass + (scale − 1) × a second pass that reuses the encodings. The cache is cleared
  before every timed (cold) pass; the second pass is also reported ("context reused").
* Rounds: one warm-up round, then ``--repeats`` rounds; in each round every model trains one epoch
  and runs one test pass, models in rotating order, so machine load hits all of them alike. Times
  are medians over the rounds; the ratios MGP/MNP and MNP/MLP are medians of the per-round ratios.
* **Utilisation**: FLOPs of the epoch's training steps and of a test pass are counted with
  ``torch.utils.flop_counter.FlopCounterMode`` (matmul-class ops only: elementwise work, sorting and
  MGP's Cholesky factorisations are not counted), divided by the measured time and compared with a
  dense float32 matmul (2048³ on CPU, 8192³ on CUDA) timed in every round of the same run.
* **Memory**: peak bytes of live tensor storages on the device during one steady-state training step
  (parameters, gradients, optimiser state, activations, temporaries) and one test batch, tracked op
  by op with a dispatch mode (:class:`LiveTensorBytes`), not the process's resident set.
* **Step metrics** (``mnp.step_metrics``): ATen ops, host syncs (which ops) and ``torch._dynamo``
  graph breaks of one steady-state training step: what stands between the step and one CUDA graph.
* ``--scaling``: MNP's training step and test batch against N^m (100 … 3200) and N_T, with linear
  fits and plots (``--plot-dir``).
* ``--profile``: where MNP's training step goes (regions and top operators, torch.profiler), and
  sparsemax with a full sort against partial sorts on the case's real attention scores.
* ``--sweep``: the ``experiment=paper_main`` MNP sweep on the real datasets estimated from measured
  parts (warm-up epoch, main epoch, test with the noise protocol, process start-up).
* ``--models ... mnp_ref``: MNP's straightforward reference implementation (``fast=False``, same
  math) side by side: the before/after of the optimisations.
* ``--precision bf16-mixed`` (bf16 autocast; attention, sparsemax and the variances stay float32) and
  ``--compile`` (MNP's ``compile=True``) are switches.

CPU threads default to 1 (``--threads``): the machine's 2 cores are shared with other jobs.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import platform
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from mnp.decoder import Decoder
from mnp.encoders import LEAKY_SLOPE
from mnp.optim import make_optimizer
from mnp.routine import Routine

CONF = Path(__file__).resolve().parents[1] / "conf"
REAL = ("handwritten", "cub", "pie", "scene15")
SHAPES = {"caltech101": ((4096, 4096), 101, 8677), "hmdb": ((1000, 1000), 51, 6718),
          "cifar10c": ((2048, 2048, 2048), 10, 50000)}
DATASETS = REAL + tuple(SHAPES)
MODELS = ("mnp", "mgp", "mlp")
OPTIONAL_MODELS = ("mnp_ref",)  # MNP's straightforward reference implementation (fast=False): before/after
BATCH, EVAL_BATCH = 200, 1000
UTIL_TARGET = {"caltech101": 0.4, "cifar10c": 0.4}

log = logging.getLogger("mnp.bench")


# ---------------------------------------------------------------------------- the MLP floor
class MLPFloor(Routine):
    """The cheapest model with MNP's widths: the same per-modality input projections (Linear d^m → d_e +
    LeakyReLU), their mean, and MNP's decoder widths (FC d_e → d_e/2, norm, FC 2K; the first K outputs
    are the logits). No context, attention or Monte Carlo samples: MNP's time over this is its cost of
    being a neural process."""

    def __init__(self, num_classes, view_dims, d_e: int = 512, norm: str = "layer", norm_eps: float = 1e-5,
                 bn_momentum: float = 0.1, optim: dict | None = None):
        super().__init__(num_classes, view_dims)
        self.projections = nn.ModuleList(nn.Sequential(nn.Linear(d, d_e), nn.LeakyReLU(LEAKY_SLOPE))
                                         for d in self.view_dims)
        self.decoder = Decoder(d_e, self.num_classes, norm, norm_eps, bn_momentum)
        self.optim_cfg = dict(optim or {})

    def logits(self, views):
        h = torch.stack([p(v) for p, v in zip(self.projections, views)]).mean(0)
        return self.decoder(h)[0]

    def training_loss(self, views, y):
        logits = self.logits(views)
        return F.cross_entropy(logits.float(), y), {}

    def predict(self, views):
        probs = self.logits(views).float().softmax(-1)
        return probs[None], -(probs * probs.clamp_min(1e-12).log()).sum(-1)

    def configure_optimizers(self):
        fused = all(p.device.type in ("cpu", "cuda") for p in self.parameters()) or None
        return make_optimizer(self.parameters(), max_epochs=1, **{"fused": fused, **self.optim_cfg})


# ---------------------------------------------------------------------------- configs and data
def compose_cfg(model: str, dataset: str, overrides: tuple[str, ...] = ()) -> dict:
    """The resolved ``train.yaml`` for (model, dataset), as plain containers."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from mnp.validate import resolve_auto
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"model={model}", f"dataset={dataset}", "logger=none",
                                          "paths.output_dir=.", *overrides])
    GlobalHydra.instance().clear()
    resolve_auto(cfg)
    return OmegaConf.to_container(cfg, resolve=False) | {"model": OmegaConf.to_container(cfg.model, resolve=True),
                                                         "trainer": OmegaConf.to_container(cfg.trainer, resolve=True)}


def compose_model_cfg(model: str, dataset: str, overrides: tuple[str, ...] = ()) -> dict:
    """The resolved ``model`` node of ``train.yaml`` for (model, dataset), without its ``name``."""
    node = compose_cfg(model, dataset, overrides)["model"]
    node.pop("name", None)
    return node


def build_model(name: str, dataset: str, num_classes: int, view_dims, extra: dict | None = None) -> Routine:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf
    if name == "mlp":
        m = {**compose_model_cfg("mnp", dataset), **(extra or {})}
        return MLPFloor(num_classes, view_dims, d_e=m["d_e"], norm=m["norm"], norm_eps=m["norm_eps"],
                        bn_momentum=m["bn_momentum"], optim=m.get("optim"))
    node = compose_model_cfg("mnp" if name == "mnp_ref" else name, dataset)
    if name in ("mnp", "mnp_ref"):
        node["warmup_epochs"] = 0  # time the main stage
        node["fast"] = name == "mnp"
    node.update(extra or {})
    return instantiate(OmegaConf.create(node), num_classes=num_classes, view_dims=list(view_dims), _convert_="all")


@dataclass
class Case:
    """One dataset's data: the datamodule (its rows may be a bounded subset) and the full sizes."""
    name: str
    dm: pl.LightningDataModule
    n_train_full: int
    n_test_full: int
    synthetic: bool
    test_views: list[Tensor] = field(default_factory=list)


def synthetic_views(dims, k: int, rows: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """Class-clustered Gaussian views (unit-variance features), labels cycling over the K classes."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(rows) % k
    y = y[torch.randperm(rows, generator=g)]
    views = [((torch.randn(k, d, generator=g)[y] + torch.randn(rows, d, generator=g)) / math.sqrt(2)).numpy()
             for d in dims]
    return views, y.numpy()


def load_case(name: str, max_train_rows: int | None, max_test_rows: int | None, data_dir: str | None) -> Case | None:
    """The dataset's rows: synthetic shapes hold ``max_train_rows`` training rows (enough for the timed
    batches) and ``max_test_rows`` test rows; real datasets are bounded in test rows only."""
    from datamodules import TensorDataModule
    if name in SHAPES:
        dims, k, n = SHAPES[name]
        n_test = round(0.2 * n)
        n_train = n - n_test
        tr = min(n_train, max_train_rows or n_train)
        tr = max(tr, min(n_train, 8 * k))  # enough rows of every class for the context memory
        te = min(n_test, max_test_rows or n_test)
        views, y = synthetic_views(dims, k, tr + te)
        dm = TensorDataModule(views, y, np.arange(tr), np.arange(tr, tr + te), batch_size=BATCH,
                              eval_batch_size=EVAL_BATCH, scaling="none")
        dm.setup("fit")
        return Case(name, dm, n_train, n_test, True)
    from datamodules.errors import DataError
    from datamodules.features import FeatureDataModule
    root = data_dir or os.environ.get("MNP_DATA_DIR") or str(Path.home() / ".cache/mnp/data")
    scaling = compose_dataset_scaling(name)
    dm = FeatureDataModule(name, root, download=False, batch_size=BATCH, eval_batch_size=EVAL_BATCH, scaling=scaling)
    try:
        dm.setup("fit")
    except (DataError, FileNotFoundError, OSError) as e:
        print(f"skipping {name}: {str(e).splitlines()[0]}", file=sys.stderr)
        return None
    n_train, n_test = len(dm.train_y), len(dm.test_y)
    if max_test_rows and n_test > max_test_rows:  # --quick: the first test rows, extrapolated
        dm.test_views, dm.test_y = [v[:max_test_rows] for v in dm.test_views], dm.test_y[:max_test_rows]
    return Case(name, dm, n_train, n_test, False)


def compose_dataset_scaling(name: str) -> str:
    from datamodules.sources import DATASETS as SPECS
    return SPECS[name].scaling


# ---------------------------------------------------------------------------- measurement helpers
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class LiveTensorBytes(TorchDispatchMode):
    """Bytes of tensor storages alive on one device, and their peak, seen op by op: every op's outputs
    are registered, freed storages are dropped (weak references) before each registration."""

    def __init__(self, device: torch.device, existing=()):
        super().__init__()
        self.device, self.refs, self.now, self.peak = device, {}, 0, 0
        for t in existing:
            self._add(t)
        self.start = self.peak = self.now

    def _add(self, t) -> None:
        if isinstance(t, Tensor) and t.device.type == self.device.type and t.layout == torch.strided:
            st = t.untyped_storage()
            if st._cdata not in self.refs:
                self.refs[st._cdata] = (StorageWeakRef(st), st.nbytes())
                self.now += st.nbytes()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for key, (ref, n) in list(self.refs.items()):
            if ref.expired():
                del self.refs[key]
                self.now -= n
        for t in tree_flatten(out)[0]:
            self._add(t)
        self.peak = max(self.peak, self.now)
        return out


def state_tensors(*objs) -> list[Tensor]:
    """Parameters, their gradients, buffers and optimiser state of modules and optimisers."""
    out = []
    for o in objs:
        if isinstance(o, nn.Module):
            out += [*o.parameters(), *(p.grad for p in o.parameters() if p.grad is not None), *o.buffers()]
        else:
            out += [v for st in o.state.values() for v in st.values() if isinstance(v, Tensor)]
    return out


def tracked_peak_mb(fn, device: torch.device, *track) -> float:
    """Peak MiB of the tensors alive while ``fn`` runs, counting the parameters, gradients, buffers and
    optimiser state of ``track`` (modules, optimisers) from the start."""
    mode = LiveTensorBytes(device, state_tensors(*track))
    with mode:
        fn()
    return mode.peak / 2**20


def matmul_gflops(device: torch.device, dtype: torch.dtype = torch.float32, n: int | None = None, reps: int = 3) -> float:
    """Dense matmul throughput (GFLOP/s): the median of ``reps`` timed n×n×n products."""
    n = n or (8192 if device.type == "cuda" else 2048)
    probe = torch.randn(256, 256, device=device).to(dtype)
    for _ in range(2):  # the second one is timed
        sync(device)
        t0 = time.perf_counter()
        probe @ probe
        sync(device)
    rate = 2 * 256**3 / max(time.perf_counter() - t0, 1e-9)
    n = max(256, min(n, int((0.5 * rate / 2) ** (1 / 3))))  # at most ~0.5 s per product (bf16 on AVX2 CPUs)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    a @ b
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        a @ b
        sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9


def count_flops(fn) -> int:
    with FlopCounterMode(display=False) as fc:
        fn()
    return int(fc.get_total_flops())


def clear_cache(model) -> None:
    if hasattr(model, "clear_context_cache"):
        model.clear_context_cache()


class EpochTimer(pl.Callback):
    """Wall time of a training epoch."""

    def __init__(self, device: torch.device):
        self.device, self.seconds = device, None

    def on_train_epoch_start(self, trainer, pl_module):
        sync(self.device)
        self.t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module):
        sync(self.device)
        self.seconds = time.perf_counter() - self.t0


def train_epoch(model: Routine, dm, device: torch.device, limit: int | None, precision: str) -> float:
    """Seconds of one Lightning training epoch (``limit`` batches at most)."""
    timer = EpochTimer(device)
    trainer = pl.Trainer(max_epochs=1, accelerator=device.type, devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0, limit_train_batches=limit or 1.0, callbacks=[timer],
                         precision=precision, use_distributed_sampler=False)
    trainer.fit(model, datamodule=dm)
    return timer.seconds


def autocast(device: torch.device, precision: str):
    if precision.startswith("bf16"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def test_pass(model: Routine, views: list[Tensor], device: torch.device, precision: str,
              warm: bool = False) -> tuple[float, float | None]:
    """Seconds of the test views through ``predict`` in batches of 1000, context cache cleared first
    (cold); with ``warm`` also a second pass that reuses the first pass's context encodings."""
    model.to(device).eval()
    clear_cache(model)
    times = []
    for _ in range(2 if warm else 1):
        sync(device)
        t0 = time.perf_counter()
        with torch.inference_mode(), autocast(device, precision):
            for i in range(0, views[0].shape[0], EVAL_BATCH):
                probs, unc = model.predict([v[i:i + EVAL_BATCH] for v in views])
                probs.mean(0)
        sync(device)
        times.append(time.perf_counter() - t0)
    model.train()
    return times[0], times[1] if warm else None


def manual_step(model: Routine, opt, views, y, precision: str, device: torch.device) -> None:
    """One training step as the model's training_step does it, without Lightning."""
    with autocast(device, precision):
        loss, _ = model.training_loss(views, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    clip = model.hparams.get("clip_norm")
    if clip:
        model.configure_gradient_clipping(opt, clip)
    opt.step()
    if hasattr(model, "_dcm_batch"):
        model.on_train_batch_end(None, None, 0)


def first_optimizer(model: Routine):
    opt = model.configure_optimizers()
    opt = opt[0] if isinstance(opt, (list, tuple)) else opt
    return opt["optimizer"] if isinstance(opt, dict) else opt


def memory_peaks(model: Routine, dm, test_views: list[Tensor], device: torch.device, precision: str) -> tuple[float, float]:
    """Peak MiB of one steady-state training step (batch of 200) and of one test batch (1000)."""
    model.to(device).train()
    opt = first_optimizer(model)
    views, y = [v[:BATCH].to(device) for v in dm.train_views], dm.train_y[:BATCH].to(device)
    manual_step(model, opt, views, y, precision, device)  # optimiser state exists from here on
    train = tracked_peak_mb(lambda: manual_step(model, opt, views, y, precision, device), device, model, opt)
    model.eval()
    clear_cache(model)

    def predict():
        with torch.no_grad(), autocast(device, precision):
            model.predict([v[:EVAL_BATCH] for v in test_views])
    test = tracked_peak_mb(predict, device, model)
    model.train()
    return train, test


def epoch_batches(n: int) -> list[int]:
    """Batch sizes of one epoch over n rows."""
    return [BATCH] * (n // BATCH) + ([n % BATCH] if n % BATCH else [])


def training_flops(model: Routine, dm, device: torch.device, sizes: list[int], precision: str) -> int:
    """FLOPs of the training steps of batches of the given sizes (forward and backward)."""
    model.to(device).train()
    total, cache = 0, {}
    for b in sizes:
        if b not in cache:
            views = [v[:b].to(device) for v in dm.train_views]
            y = dm.train_y[:b].to(device)

            def step():
                with autocast(device, precision):
                    loss, _ = model.training_loss(views, y)
                loss.backward()
            cache[b] = count_flops(step)
            model.zero_grad(set_to_none=True)
            if hasattr(model, "_dcm_batch"):
                model._dcm_batch = None
        total += cache[b]
    return total


def test_flops(model: Routine, views: list[Tensor], device: torch.device, precision: str,
               scale: float = 1.0) -> int:
    """FLOPs of a test pass over ``scale`` × the given rows: linear in rows, except for a model that
    reuses its context encodings, whose one-off encoding is counted once (cold pass + warm rest)."""
    model.to(device).eval()
    clear_cache(model)

    def run():  # no_grad: gpytorch's lazy kernels fail under FlopCounterMode + inference_mode
        with torch.no_grad(), autocast(device, precision):
            for i in range(0, views[0].shape[0], EVAL_BATCH):
                model.predict([v[i:i + EVAL_BATCH] for v in views])
    cold = count_flops(run)
    warm = count_flops(run) if hasattr(model, "clear_context_cache") else cold
    model.train()
    return int(cold + (scale - 1) * warm)


def extrapolate_test(cold: float, warm: float | None, scale: float) -> float:
    """A full test pass from a pass over 1/scale of the rows: the first pass's one-off costs (MNP's
    context encoding) once, the rest at the per-row cost of a pass that reuses them."""
    return cold + (scale - 1) * (cold if warm is None else warm)


def step_metrics_of(model: Routine, dm, device: torch.device, args) -> dict:
    """ATen ops, host syncs and graph breaks of one training step (mnp.step_metrics); {} when switched off."""
    if not args.step_metrics:
        return {}
    from mnp import step_metrics
    return step_metrics.measure_case(model, dm, device, BATCH, explain=args.graph_breaks,
                                     autocast=lambda: autocast(device, args.precision))


# ---------------------------------------------------------------------------- one dataset
def bench_case(case: Case, models: tuple[str, ...], args, device: torch.device) -> tuple[list[dict], dict, dict]:
    dm = case.dm
    n_train_rows, n_test_rows = len(dm.train_y), len(dm.test_y)
    full_batches = math.ceil(case.n_train_full / BATCH)
    limit = args.max_batches if (case.synthetic or args.quick) and args.max_batches else None
    timed_batches = min(full_batches, limit or full_batches, math.ceil(n_train_rows / BATCH))
    train_scale = full_batches / timed_batches
    test_scale = case.n_test_full / n_test_rows
    torch.manual_seed(0)
    extra = {**args.model_extra, "mlp": {**args.model_extra["mnp"], **args.model_extra["mlp"]}}
    built = {m: build_model(m, case.name, dm.num_classes, dm.view_dims, extra[m]) for m in models}
    test_views = [v.to(device) for v in dm.test_views]
    rec = {m: {"train": [], "test": [], "test_warm": []} for m in models}
    cached = {m for m in models if m == "mnp"}  # the fast MNP reuses its context encodings
    peaks = []
    rounds = 1 + args.repeats
    for r in range(rounds):
        peaks.append(matmul_gflops(device, torch.bfloat16 if args.precision.startswith("bf16") else torch.float32))
        order = list(models[r % len(models):] + models[:r % len(models)])
        for m in order:
            warm = r == 0
            t = train_epoch(built[m], dm, device, 1 if warm else timed_batches, args.precision)
            ts, tw = test_pass(built[m], test_views if not warm else [v[:EVAL_BATCH] for v in test_views],
                               device, args.precision, warm=m in cached)
            if not warm:
                rec[m]["train"].append(t * train_scale)
                rec[m]["test"].append(extrapolate_test(ts, tw, test_scale))
                rec[m]["test_warm"].append((ts if tw is None else tw) * test_scale)
        log.info("%s: round %d/%d done", case.name, r + 1, rounds)
    peak = statistics.median(peaks[1:] or peaks)
    sizes_timed = epoch_batches(min(n_train_rows, timed_batches * BATCH))
    cases = []
    for m in models:
        model = built[m]
        train_fl = training_flops(model, dm, device, sizes_timed, args.precision)
        test_fl = test_flops(model, test_views, device, args.precision, test_scale)
        train_mem, test_mem = memory_peaks(model, dm, test_views, device, args.precision)
        steps = step_metrics_of(model, dm, device, args)
        train_s, test_s = statistics.median(rec[m]["train"]), statistics.median(rec[m]["test"])
        train_gf = train_fl * train_scale / train_s / 1e9
        test_gf = test_fl / test_s / 1e9
        cases.append({"dataset": case.name, "model": m, "train_epoch_s": train_s, "test_s": test_s,
                      "test_s_context_reused": statistics.median(rec[m]["test_warm"]),
                      "test_samples_per_s": case.n_test_full / test_s, "peak_mem_mb": train_mem,
                      "test_peak_mem_mb": test_mem,
                      "train_gflops_per_s": train_gf, "test_gflops_per_s": test_gf,
                      "matmul_peak_gflops_per_s": peak, "train_util": train_gf / peak, "test_util": test_gf / peak,
                      "train_step_gflop": train_fl / len(sizes_timed) / 1e9,
                      "test_pass_gflop": test_fl / 1e9,
                      "train_batches_timed": timed_batches, "train_batches_full": full_batches,
                      "test_rows_timed": n_test_rows, "test_rows_full": case.n_test_full,
                      "extrapolated": train_scale > 1 or test_scale > 1,
                      "train_epoch_s_rounds": rec[m]["train"], "test_s_rounds": rec[m]["test"], **steps})
    ratios = {}
    if "mnp" in models:
        def paired(a, b, kind):
            return statistics.median(x / y for x, y in zip(rec[a][kind], rec[b][kind]))
        if "mgp" in models:
            ratios["mgp_over_mnp_train"] = paired("mgp", "mnp", "train")
            ratios["mgp_over_mnp_test"] = paired("mgp", "mnp", "test")
            ratios["mgp_over_mnp_test_context_reused"] = statistics.median(
                x / y for x, y in zip(rec["mgp"]["test"], rec["mnp"]["test_warm"]))
        if "mlp" in models:
            ratios["mnp_over_mlp_train"] = paired("mnp", "mlp", "train")
            ratios["mnp_over_mlp_test"] = paired("mnp", "mlp", "test")
        if "mnp_ref" in models:
            ratios["mnp_ref_over_mnp_train"] = paired("mnp_ref", "mnp", "train")
            ratios["mnp_ref_over_mnp_test"] = paired("mnp_ref", "mnp", "test")
    return cases, ratios, {"matmul_peak_rounds": peaks}


# ---------------------------------------------------------------------------- scaling curves
def _fit_line(x, y) -> dict:
    x, y = np.asarray(x, float), np.asarray(y, float)
    slope, intercept = np.polyfit(x, y, 1)
    pred = slope * x + intercept
    ss = float(((y - y.mean()) ** 2).sum())
    return {"slope": float(slope), "intercept": float(intercept),
            "r2": 1.0 - float(((y - pred) ** 2).sum()) / ss if ss > 0 else 1.0}


def scaling(args, device: torch.device) -> dict:
    """MNP's training step and test batch against N^m (at N_T = 200) and N_T (at N^m = 400)."""
    dims, _, _ = SHAPES[args.scaling_shape]
    k = 10  # N^m divisible by K at every point
    n_ms = [100, 200, 400, 800, 1600, 3200] if not args.quick else [100, 200, 400]
    n_ts = [50, 100, 200, 400, 800, 1600] if not args.quick else [50, 100, 200]
    reps = 3 if not args.quick else 1
    views, y = synthetic_views(dims, k, max(n_ts) + max(n_ms))
    views = [torch.as_tensor(v, device=device) for v in views]
    y = torch.as_tensor(y, device=device)
    out = {"shape": {"dims": list(dims), "num_classes": k, "config": f"mnp_{args.scaling_shape}"}}

    def measure(n_m, n_t):
        torch.manual_seed(0)
        model = build_model("mnp", args.scaling_shape, k, dims, {**args.model_extra["mnp"], "memory_size": n_m}).to(device)
        model.init_memory([v[max(n_ts):] for v in views], y[max(n_ts):])
        opt = first_optimizer(model)
        tv, ty = [v[:n_t] for v in views], y[:n_t]
        manual_step(model, opt, tv, ty, args.precision, device)  # warm-up
        train, test = [], []
        for _ in range(reps):
            sync(device)
            t0 = time.perf_counter()
            manual_step(model, opt, tv, ty, args.precision, device)
            sync(device)
            train.append(time.perf_counter() - t0)
        train_mem = tracked_peak_mb(lambda: manual_step(model, opt, tv, ty, args.precision, device), device, model, opt)
        model.eval()
        with torch.inference_mode(), autocast(device, args.precision):
            for _ in range(reps + 1):
                clear_cache(model)
                sync(device)
                t0 = time.perf_counter()
                model.predict(tv)
                sync(device)
                test.append(time.perf_counter() - t0)

        def predict():
            clear_cache(model)
            with torch.no_grad(), autocast(device, args.precision):
                model.predict(tv)
        test_mem = tracked_peak_mb(predict, device, model)
        return {"n_m": n_m, "n_t": n_t, "train_step_s": statistics.median(train),
                "test_batch_s": statistics.median(test[1:]), "train_peak_mem_mb": train_mem,
                "test_peak_mem_mb": test_mem}

    for key, points in (("n_m", [(n, 200) for n in n_ms]), ("n_t", [(400, n) for n in n_ts])):
        rows = [measure(*p) for p in points]
        xs = [r[key] for r in rows]
        out[key] = {"points": rows, "fits": {f: _fit_line(xs, [r[f] for r in rows])
                                             for f in ("train_step_s", "test_batch_s", "train_peak_mem_mb",
                                                       "test_peak_mem_mb")}}
        log.info("scaling against %s done", key)
    return out


def plot_scaling(result: dict, out_dir: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, label in (("n_m", "context size $N^m$ (N_T = 200)"), ("n_t", "batch size $N_T$ (N^m = 400)")):
        rows = result[key]["points"]
        xs = np.array([r[key] for r in rows], float)
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
        for ax, fields, unit in ((axes[0], ("train_step_s", "test_batch_s"), "seconds"),
                                 (axes[1], ("train_peak_mem_mb", "test_peak_mem_mb"), "peak MiB")):
            for f in fields:
                ys = np.array([r[f] for r in rows], float)
                fit = result[key]["fits"][f]
                (dots,) = ax.plot(xs, ys, "o", label=f"{f} (R²={fit['r2']:.3f})")
                ax.plot(xs, fit["slope"] * xs + fit["intercept"], "-", alpha=0.6, color=dots.get_color())
            ax.set_xlabel(label)
            ax.set_ylabel(unit)
            ax.legend(fontsize=7)
        fig.suptitle(f"MNP scaling, shape {result['shape']['config']} (K = 10)", fontsize=9)
        fig.tight_layout()
        path = out_dir / f"scaling_{key}.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths


# ---------------------------------------------------------------------------- profile
def profile_case(case: Case, device: torch.device, steps: int = 3) -> str:
    """Where one MNP training step goes: labelled regions and the top operators (self time)."""
    from torch.profiler import ProfilerActivity, profile, record_function
    dm = case.dm
    model = build_model("mnp", case.name, dm.num_classes, dm.view_dims).to(device)
    model.init_memory(dm.train_views, dm.train_y)
    opt = model.configure_optimizers()["optimizer"]
    views, y = [v[:BATCH].to(device) for v in dm.train_views], dm.train_y[:BATCH].to(device)
    clip = model.hparams.clip_norm

    def step():
        with record_function("step.forward"):
            loss, _ = model.training_loss(views, y)
        opt.zero_grad(set_to_none=True)
        with record_function("step.backward"):
            loss.backward()
        with record_function("step.clip"):
            if clip:
                model.configure_gradient_clipping(opt, clip)
        with record_function("step.optimizer"):
            opt.step()
        with record_function("step.memory_update"):
            model.on_train_batch_end(None, None, 0)
    step()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
    events = prof.key_averages()
    sparsemax_info, sparsemax_ms = sparsemax_timings(model, views, device)
    regions = [(e.key, e.cpu_time_total / steps / 1e3) for e in events
               if e.key.startswith("step.") or e.key.startswith("mnp.")]
    total = sum(t for k, t in regions if k.startswith("step."))
    lines = [f"### where MNP's training step goes: {case.name} ({steps} steps, ms per step)", "",
             "| region | ms | % of step |", "|---|---|---|"]
    for k, t in sorted(regions, key=lambda kv: (not kv[0].startswith("step."), -kv[1])):
        lines.append(f"| {k} | {t:.1f} | {100 * t / total:.1f} |")
    lines += ["", f"sparsemax, forward + backward, on this case's attention {sparsemax_info} (ms): " +
              ", ".join(f"{k}: {v:.1f}" for k, v in sparsemax_ms.items()),
              "", "top operators by self time:", "```",
              events.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40), "```"]
    return "\n".join(lines)


def sparsemax_timings(model, views, device: torch.device, reps: int = 5) -> tuple[str, dict[str, float]]:
    """entmax's sparsemax with a full sort against partial sorts (top-k, exact) on real scores."""
    from mnp.attention import normalise, topk_hint
    with torch.no_grad():
        targets, (contexts, *_) = model._encode(views)
        scores = model.similarity(targets, contexts).float()
    grad = torch.randn_like(scores)
    n = scores.shape[-1]
    hint = topk_hint(normalise(scores, "sparsemax"))
    ks = {"full sort": None, f"top-k hint ({hint})": hint, **{f"k={k}": k for k in (32, 128) if k < n}}

    def run(k):
        x = scores.clone().requires_grad_()
        (normalise(x, "sparsemax", k) * grad).sum().backward()
    out = {}
    for name, k in ks.items():
        if name.startswith("top-k") and hint is None:
            continue
        run(k)
        times = []
        for _ in range(reps):
            sync(device)
            t0 = time.perf_counter()
            run(k)
            sync(device)
            times.append(time.perf_counter() - t0)
        out[name] = 1e3 * statistics.median(times)
    support = (normalise(scores, "sparsemax") > 0).sum(-1).float()
    return f"scores {tuple(scores.shape)}, support mean {support.mean():.0f} / max {support.max():.0f}", out


# ---------------------------------------------------------------------------- sweep estimate
def startup_s() -> float:
    """Seconds for a fresh Python process to import the training pipeline (each sweep job pays it)."""
    import subprocess
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import mnp.pipeline, datamodules.features, baselines.mgp"], check=True,
                   cwd=str(CONF.parent), capture_output=True)
    return time.perf_counter() - t0


def sweep_estimate(args, device: torch.device, cases: list[dict]) -> dict:
    """The ``experiment=paper_main`` MNP sweep on the real datasets (5 seeds each, run as 2 parallel
    one-thread jobs on 2 cores), from measured parts per dataset: a warm-up epoch, a main epoch (the
    benchmark's), the test with the noise protocol, and the process start-up."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf
    epoch_s = {c["dataset"]: c["train_epoch_s"] for c in cases if c["model"] == "mnp"}
    out = {"datasets": {}, "seeds": 5, "parallel_jobs": 2, "startup_s": startup_s()}
    for name in REAL:
        case = load_case(name, None, None, args.data_dir)
        if case is None or name not in epoch_s:
            continue
        cfg = compose_cfg("mnp", name)
        node = dict(cfg["model"])
        node.pop("name", None)
        node.update(args.model_extra["mnp"])
        epochs, warm = int(cfg["trainer"]["max_epochs"]), int(node.get("warmup_epochs", 0))
        torch.manual_seed(0)
        model = instantiate(OmegaConf.create(node), num_classes=case.dm.num_classes, view_dims=case.dm.view_dims,
                            _convert_="all")
        warm_s = statistics.median(train_epoch(model, case.dm, device, None, args.precision) for _ in range(3)) \
            if warm else 0.0
        model.configure_evaluation(**cfg["eval"])
        trainer = pl.Trainer(accelerator=device.type, devices=1, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, enable_checkpointing=False)
        t0 = time.perf_counter()
        trainer.test(model, datamodule=case.dm, verbose=False)
        test_s = time.perf_counter() - t0
        job = out["startup_s"] + warm * warm_s + (epochs - warm) * epoch_s[name] + test_s
        out["datasets"][name] = {"epochs": epochs, "warmup_epochs": warm, "warmup_epoch_s": warm_s,
                                 "epoch_s": epoch_s[name], "test_with_noise_s": test_s, "job_s": job}
        log.info("sweep estimate: %s done", name)
    out["total_s"] = out["seeds"] * sum(d["job_s"] for d in out["datasets"].values()) / out["parallel_jobs"]
    return out


# ---------------------------------------------------------------------------- report
def markdown(result: dict) -> str:
    meta = result["meta"]
    out = [f"## MNP speed benchmark ({meta['device']}, {meta['threads']} CPU thread(s), precision {meta['precision']}"
           f"{', torch.compile' if meta['compile'] else ''})",
           "", f"torch {meta['torch']}; load average {meta['loadavg_start']} at start, {meta['loadavg_end']} at end; "
           f"{meta['repeats']} timed rounds after one warm-up round; medians; ratios are medians of per-round ratios.",
           "Rows marked * are extrapolated from a bounded number of training batches / test rows to the full "
           "epoch / test set (see batches and rows).", "",
           "| dataset | model | train epoch s | test s (context reused) | test samples/s | peak MiB (train / test) "
           "| train GFLOP/s (util) | test GFLOP/s (util) | matmul peak GFLOP/s | batches timed/full | test rows timed/full |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in result["cases"]:
        star = "*" if c["extrapolated"] else ""
        reused = f" ({c['test_s_context_reused']:.3f})" if c["model"] == "mnp" else ""
        out.append(f"| {c['dataset']}{star} | {c['model']} | {c['train_epoch_s']:.3f} | {c['test_s']:.3f}{reused} | "
                   f"{c['test_samples_per_s']:.0f} | {c['peak_mem_mb']:.0f} / {c['test_peak_mem_mb']:.0f} | "
                   f"{c['train_gflops_per_s']:.1f} ({100 * c['train_util']:.0f}%) | "
                   f"{c['test_gflops_per_s']:.1f} ({100 * c['test_util']:.0f}%) | {c['matmul_peak_gflops_per_s']:.1f} | "
                   f"{c['train_batches_timed']}/{c['train_batches_full']} | {c['test_rows_timed']}/{c['test_rows_full']} |")
    out += ["", "| dataset | MGP/MNP train (target ≥ 3) | MGP/MNP test (target ≥ 5) | MGP/MNP test, context reused "
            "| MNP/MLP train | MNP/MLP test | MNP train util | MNP test util | before/after (mnp_ref/mnp) train, test |",
            "|---|---|---|---|---|---|---|---|---|"]
    mnp = {c["dataset"]: c for c in result["cases"] if c["model"] == "mnp"}

    def fmt(v, target=None):
        if v is None:
            return "–"
        return f"{v:.2f}" + ("" if target is None else (" ✓" if v >= target else " ✗"))
    for d, r in result["ratios"].items():
        c = mnp.get(d, {})
        ut = UTIL_TARGET.get(d)
        util = lambda key: "–" if key not in c else f"{100 * c[key]:.0f}%" + (
            "" if ut is None else (" ✓" if c[key] >= ut else " ✗"))
        out.append(f"| {d} | {fmt(r.get('mgp_over_mnp_train'), 3.0)} | {fmt(r.get('mgp_over_mnp_test'), 5.0)} | "
                   f"{fmt(r.get('mgp_over_mnp_test_context_reused'), 5.0)} | "
                   f"{fmt(r.get('mnp_over_mlp_train'))} | {fmt(r.get('mnp_over_mlp_test'))} | {util('train_util')} | "
                   f"{util('test_util')} | {fmt(r.get('mnp_ref_over_mnp_train'))}, {fmt(r.get('mnp_ref_over_mnp_test'))} |")
    if "sweep" in result:
        sw = result["sweep"]
        out += ["", f"### paper_main MNP sweep estimate ({sw['seeds']} seeds, {sw['parallel_jobs']} parallel "
                f"one-thread jobs; start-up {sw['startup_s']:.1f} s per job)", "",
                "| dataset | epochs (warm-up) | warm-up epoch s | epoch s | test with noise s | one job s |",
                "|---|---|---|---|---|---|"]
        for d, v in sw["datasets"].items():
            out.append(f"| {d} | {v['epochs']} ({v['warmup_epochs']}) | {v['warmup_epoch_s']:.3f} | {v['epoch_s']:.3f} | "
                       f"{v['test_with_noise_s']:.1f} | {v['job_s']:.0f} |")
        out.append(f"| **sweep** | | | | | **{sw['total_s']:.0f} s = {sw['total_s'] / 60:.1f} min** (target < 30 min) |")
    if "scaling" in result:
        out += ["", "### MNP scaling (linear fits)", "", "| against | quantity | slope | intercept | R² |",
                "|---|---|---|---|---|"]
        for key in ("n_m", "n_t"):
            for f, fit in result["scaling"][key]["fits"].items():
                out.append(f"| {key} | {f} | {fit['slope']:.4g} | {fit['intercept']:.4g} | {fit['r2']:.3f} |")
    return "\n".join(out)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m mnp.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS + OPTIONAL_MODELS,
                   help="mnp_ref: MNP's straightforward reference implementation, for before/after")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--threads", type=int, default=1, help="CPU intra-op threads (default 1)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", default="32-true", choices=("32-true", "bf16-mixed"),
                   help="bf16-mixed: bf16 autocast (attention, sparsemax and variances stay float32)")
    p.add_argument("--compile", action="store_true", help="MNP with torch.compile on its hot paths")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds after the warm-up round")
    p.add_argument("--max-batches", type=int, default=3,
                   help="training batches per timed epoch for the synthetic shapes (extrapolated to the full epoch)")
    p.add_argument("--max-test-rows", type=int, default=1000, help="test rows of the synthetic shapes (extrapolated)")
    p.add_argument("--quick", action="store_true", help="tiny run: 2 rounds, 1 batch, 200 test rows, every dataset bounded")
    p.add_argument("--scaling", action="store_true", help="also measure MNP against N^m and N_T and plot it")
    p.add_argument("--scaling-shape", default="hmdb", choices=tuple(SHAPES))
    p.add_argument("--plot-dir", type=Path, default=Path("benchmarks"))
    p.add_argument("--profile", action="store_true", help="also print where MNP's training step goes")
    p.add_argument("--sweep", action="store_true",
                   help="also estimate the paper_main MNP sweep (real datasets, 5 seeds, 2 parallel jobs) from measured parts")
    p.add_argument("--set", action="append", default=[], metavar="MODEL.KEY=VALUE",
                   help="override a model's config, e.g. mnp.d_e=256 (the MLP floor follows mnp's widths)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--no-step-metrics", dest="step_metrics", action="store_false",
                   help="skip the ops / host syncs / graph breaks of one training step (mnp.step_metrics)")
    p.add_argument("--no-graph-breaks", dest="graph_breaks", action="store_false",
                   help="step metrics without torch._dynamo.explain (its tracing takes seconds per model)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.max_batches, args.max_test_rows = min(args.repeats, 2), 1, 200
    import yaml
    args.model_extra = {m: {} for m in MODELS + OPTIONAL_MODELS}
    for item in args.set:
        key, eq, value = item.partition("=")
        model, _, name = key.partition(".")
        if model not in args.model_extra or not name or not eq:
            p.error(f"--set {item}: expected MODEL.KEY=VALUE with MODEL one of {', '.join(args.model_extra)}")
        args.model_extra[model][name] = yaml.safe_load(value)
        if model == "mnp":
            args.model_extra["mnp_ref"].setdefault(name, yaml.safe_load(value))
    if args.compile:
        args.model_extra["mnp"]["compile"] = True
    return args


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    warnings.filterwarnings("ignore")
    for name in ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric", "datamodules"):
        logging.getLogger(name).setLevel(logging.ERROR)
    meta = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
            "threads": torch.get_num_threads(), "precision": args.precision, "compile": args.compile,
            "torch": torch.__version__, "repeats": args.repeats, "quick": args.quick,
            "loadavg_start": round(os.getloadavg()[0], 2), "command": " ".join(sys.argv)}
    print(f"# mnp.bench: {meta['device']}, torch.set_num_threads({meta['threads']}), precision {args.precision}",
          flush=True)
    result = {"cases": [], "ratios": {}, "meta": meta, "matmul_peak_rounds": {}}
    rows = args.max_batches * BATCH if args.max_batches else None
    for name in args.dataset:
        case = load_case(name, rows, args.max_test_rows if (name in SHAPES or args.quick) else None, args.data_dir)
        if case is None:
            continue
        t0 = time.perf_counter()
        cases, ratios, extra = bench_case(case, tuple(args.models), args, device)
        result["cases"] += cases
        if ratios:
            result["ratios"][name] = ratios
        result["matmul_peak_rounds"][name] = extra["matmul_peak_rounds"]
        print(f"{name}: " + ", ".join(f"{c['model']} train {c['train_epoch_s']:.3f}s test {c['test_s']:.3f}s"
                                      for c in cases) + f" ({time.perf_counter() - t0:.0f}s)", flush=True)
        if args.profile and "mnp" in args.models:
            result.setdefault("profiles", {})[name] = profile_case(case, device)
    if args.sweep and "mnp" in args.models:
        result["sweep"] = sweep_estimate(args, device, result["cases"])
    if args.scaling:
        result["scaling"] = scaling(args, device)
        result["scaling"]["plots"] = [str(p) for p in plot_scaling(result["scaling"], args.plot_dir)]
    meta["loadavg_end"] = round(os.getloadavg()[0], 2)
    return result


def main(argv=None) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    result = run(args)
    print(markdown(result))
    from mnp.step_metrics import markdown as step_markdown
    if table := step_markdown(result["cases"]):
        print("\n" + table)
    for text in result.get("profiles", {}).values():
        print("\n" + text)
    if "scaling" in result:
        print("\nscaling plots: " + ", ".join(result["scaling"]["plots"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
        print(f"JSON: {args.json}")
    return result


def cli() -> int:
    """``mnp-bench``: the command, exit status 0 (``main`` returns the results for callers in Python)."""
    main()
    return 0


if __name__ == "__main__":
    main()
