"""MNP's training step and DCM update replayed as CUDA graphs (``accel.cuda_graph``, docs/gpu.md).

One pair of graphs per (phase, batch size): the warm-up and the main phase have their own loss and
optimiser, and an epoch's last batch may be shorter. The first batch of a pair trains eagerly (its
own, real step, on a side stream; it also creates the optimiser's state), then the step and the DCM
update are captured; every later batch is copied into the pair's static input buffers and replayed.
Lightning still sees every step: its optimiser-step counter advances around each replay, the loss and
logs it records are the graph's static outputs, and ``on_train_batch_end`` replays the DCM update.

What a graph can hold, checked by :func:`blockers` before training: a fused Adam made capturable, its
learning rates device tensors that the schedules and the warm-up's decay fill in place; a step without
host syncs (``MNP.capturable``); no per-step Python state (memory_update mse, ce or fifo;
eps_placement torch); one process; fp32. Lightning's backward and optimiser-step hooks
(``on_before_backward`` ...) run for the eager first step of a pair only.

``emulate``: the same bookkeeping, with the eager functions in place of the graphs, on any device;
what the CPU tests check against the eager path.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

log = logging.getLogger(__name__)

MAX_PAIRS = 8  # batch shapes captured per run; a loader with more shapes trains the rest eagerly


@dataclass
class _Pair:
    """Static inputs and outputs of one (phase, batch size), and its graphs (None: eager, emulated)."""

    views: list[Tensor]
    y: Tensor
    step: torch.cuda.CUDAGraph | None = None
    memory: torch.cuda.CUDAGraph | None = None
    loss: Tensor | None = None
    logs: dict[str, Tensor] = field(default_factory=dict)


def blockers(model, graph: bool | str, trainer) -> list[str]:
    """Why ``model``'s training step cannot be captured with ``accel.cuda_graph=graph`` under ``trainer``
    (empty: it can)."""
    spec, device = model.spec, trainer.strategy.root_device
    out = []
    if graph is True and device.type != "cuda":
        out.append(
            f"it needs a CUDA device, but the trainer runs on {device.type} "
            "(accel.cuda_graph=emulate checks the same path without graphs)"
        )
    if trainer.world_size > 1:
        out.append(f"{trainer.world_size} processes (DDP reads batch sizes across ranks)")
    if str(trainer.precision) not in ("32-true", "32"):
        out.append(f"trainer.precision={trainer.precision} (fp32 only)")
    if not spec.fast:
        out.append("model.fast=false (the reference path syncs with the host)")
    if spec.compile:
        out.append("model.compile=true (torch.compile's own graphs)")
    if spec.memory.update == "random":
        out.append("model.memory.update=random (the context is drawn on the host every step)")
    if spec.optim.eps_placement == "keras":
        out.append("model.optim.eps_placement=keras (ε changes every step in Python)")
    return out


def make_capturable(opt: torch.optim.Optimizer) -> None:
    """Turn a fused Adam capturable in place: learning rates as device tensors, step counts on the device."""
    for g in opt.param_groups:
        device = g["params"][0].device
        g["capturable"] = True
        if not isinstance(g["lr"], Tensor):  # float64 on a CPU: the same update as a Python float, bit for bit
            dtype = torch.float64 if device.type == "cpu" else torch.float32
            g["lr"] = torch.tensor(float(g["lr"]), device=device, dtype=dtype)
    for p, state in opt.state.items():
        if isinstance(state.get("step"), Tensor):
            state["step"] = state["step"].to(device=p.device, dtype=torch.float32)


def _outputs(loss: Tensor, logs: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
    """A step's loss and logs as a pair keeps them: without their autograd graph. A kept graph would keep
    the parameters' AccumulateGrad nodes of the stream it was built on, and the next pair's eager first step,
    on a side stream of its own, would accumulate into them across streams (torch's "AccumulateGrad node's
    stream does not match" warning on a GPU, with a sync; benchmarks/device/graph_check.py counts it)."""
    return loss.detach(), {k: v.detach() for k, v in logs.items()}


def _inner(opt) -> torch.optim.Optimizer:
    return getattr(opt, "optimizer", opt)  # Lightning wraps the torch optimiser


class StepGraphs:
    """The captured training steps of one fit of an MNP (see the module docstring)."""

    def __init__(self, model, emulate: bool = False):
        self.model, self.emulate = model, emulate
        self.pairs: dict[tuple[bool, int], _Pair] = {}
        self._new: tuple[_Pair, object] | None = None  # trained eagerly this batch; captured after its DCM update
        self._replayed: _Pair | None = None  # replayed this batch; its DCM update replays in update_memory
        self._warned = False

    def step(self, views: Sequence[Tensor], y: Tensor, opt, warm: bool) -> tuple[Tensor, dict[str, Tensor]]:
        """One training step of (views, y) with ``opt`` (Lightning's optimiser), as ``MNP.train_step``."""
        key = (warm, int(y.shape[0]))
        pair = self.pairs.get(key)
        if pair is None:
            if not warm:  # the warm-up is over: its graphs are not needed again
                self.pairs = {k: p for k, p in self.pairs.items() if not k[0]}
            if len(self.pairs) >= MAX_PAIRS:
                if not self._warned:
                    log.warning("accel.cuda_graph: more than %d batch shapes; the others train eagerly", MAX_PAIRS)
                    self._warned = True
                return self.model.train_step(views, y, opt)
            make_capturable(_inner(opt))
            pair = _Pair([v.detach().clone() for v in views], y.clone())
            with self._side_stream():  # capture needs a warm-up off the default stream
                loss, logs = self.model.train_step(pair.views, pair.y, opt)
            self._new = (pair, opt)
            self.pairs[key] = pair
            return loss, logs
        for buf, v in zip(pair.views, views):
            buf.copy_(v, non_blocking=True)
        pair.y.copy_(y, non_blocking=True)
        opt._on_before_step()  # Lightning's optimiser-step count, as opt.step() would advance it
        if self.emulate:
            pair.loss, pair.logs = _outputs(*self.model.train_step(pair.views, pair.y, _inner(opt), hooks=False))
        else:
            pair.step.replay()
        opt._on_after_step()
        self._replayed = pair
        return pair.loss, pair.logs

    def update_memory(self) -> None:
        """The DCM update of this batch (``on_train_batch_end``): eager after a pair's first step, then its
        capture; a replay after every later step."""
        if self._new is not None:
            (pair, opt), self._new = self._new, None
            self.model.update_context_memory()
            self._capture(pair, _inner(opt))
        elif self._replayed is not None:
            pair, self._replayed = self._replayed, None
            if self.emulate:
                self.model.update_context_memory()
            elif pair.memory is not None:
                pair.memory.replay()
        else:  # an eager step (more shapes than MAX_PAIRS)
            self.model.update_context_memory()

    def _capture(self, pair: _Pair, opt: torch.optim.Optimizer) -> None:
        """Each graph gets a private memory pool: the memory graph reads the step graph's outputs, and the
        pairs replay in any order, so no graph may reuse another's memory."""
        if self.emulate:
            return
        pair.step = torch.cuda.CUDAGraph()
        with torch.cuda.graph(pair.step, capture_error_mode="thread_local"):
            outputs = self.model.train_step(pair.views, pair.y, opt, hooks=False)
        pair.loss, pair.logs = _outputs(*outputs)
        if self.model._dcm_batch is not None:  # memory_write=after_step: the update is a graph of its own
            pair.memory = torch.cuda.CUDAGraph()
            with torch.cuda.graph(pair.memory, capture_error_mode="thread_local"):
                self.model.update_context_memory()

    @contextlib.contextmanager
    def _side_stream(self):
        if self.emulate:
            yield
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            yield
        torch.cuda.current_stream().wait_stream(side)
