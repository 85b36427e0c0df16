"""The benchmark's measurements: wall time of a training epoch and of a test pass, FLOPs (matmul-class
ops), a dense matmul's throughput as the device's peak, and peak bytes of live tensors, op by op."""

from __future__ import annotations

import contextlib
import statistics
import time

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from mnp.framework.routine import Routine
from mnp.tools.bench.bench_cases import BATCH, EVAL_BATCH, first_optimizer


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


def matmul_gflops(
    device: torch.device, dtype: torch.dtype = torch.float32, n: int | None = None, reps: int = 3
) -> float:
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


def train_epoch(model: Routine, dm, device: torch.device, limit: int | None, precision: str, epochs: int = 1) -> float:
    """Seconds of the last of ``epochs`` Lightning training epochs (``limit`` batches at most each)."""
    timer = EpochTimer(device)
    trainer = pl.Trainer(
        max_epochs=epochs,
        accelerator=device.type,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        limit_train_batches=limit or 1.0,
        callbacks=[timer],
        precision=precision,
        use_distributed_sampler=False,
    )
    trainer.fit(model, datamodule=dm)
    return timer.seconds


def autocast(device: torch.device, precision: str):
    if precision.startswith("bf16"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def test_pass(
    model: Routine, views: list[Tensor], device: torch.device, precision: str, warm: bool = False
) -> tuple[float, float | None]:
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
                probs, unc = model.predict([v[i : i + EVAL_BATCH] for v in views])
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
    clip = model.spec.optim.clip_norm if hasattr(model, "spec") else model.hparams.get("clip_norm")  # MNP | others
    if clip:
        model.configure_gradient_clipping(opt, clip)
    opt.step()
    if hasattr(model, "update_context_memory"):
        model.on_train_batch_end(None, None, 0)


def memory_peaks(
    model: Routine, dm, test_views: list[Tensor], device: torch.device, precision: str
) -> tuple[float, float]:
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
                    loss, _ = model.training_loss(views, y)  # noqa: B023 - step runs at once, in this iteration
                loss.backward()

            cache[b] = count_flops(step)
            model.zero_grad(set_to_none=True)
            if hasattr(model, "drop_memory_update"):
                model.drop_memory_update()
        total += cache[b]
    return total


def test_flops(model: Routine, views: list[Tensor], device: torch.device, precision: str, scale: float = 1.0) -> int:
    """FLOPs of a test pass over ``scale`` × the given rows: linear in rows, except for a model that
    reuses its context encodings, whose one-off encoding is counted once (cold pass + warm rest)."""
    model.to(device).eval()
    clear_cache(model)

    def run():  # no_grad: gpytorch's lazy kernels fail under FlopCounterMode + inference_mode
        with torch.no_grad(), autocast(device, precision):
            for i in range(0, views[0].shape[0], EVAL_BATCH):
                model.predict([v[i : i + EVAL_BATCH] for v in views])

    cold = count_flops(run)
    warm = count_flops(run) if hasattr(model, "clear_context_cache") else cold
    model.train()
    return int(cold + (scale - 1) * warm)


def extrapolate_test(cold: float, warm: float | None, scale: float) -> float:
    """A full test pass from a pass over 1/scale of the rows: the first pass's one-off costs (MNP's
    context encoding) once, the rest at the per-row cost of a pass that reuses them."""
    return cold + (scale - 1) * (cold if warm is None else warm)


def step_metrics_of(model: Routine, dm, device: torch.device, args) -> dict:
    """ATen ops, host syncs and graph breaks of one training step (mnp.tools.bench.step_metrics); {} when switched off."""
    if not args.step_metrics:
        return {}
    from mnp.tools.bench import step_metrics

    return step_metrics.measure_case(
        model, dm, device, BATCH, explain=args.graph_breaks, autocast=lambda: autocast(device, args.precision)
    )
