"""What stands between a training step and one CUDA graph: its ATen ops, host syncs and graph breaks.

One steady-state training step (after a warm-up step that creates the optimiser state) is run under a
:class:`StepOps` dispatch mode, which counts

* ``ops_per_train_step``: every ATen (``aten::``) op dispatched (forward, losses, backward, clipping, L2,
  the optimiser step and the DCM memory update), by name; ops of other namespaces (the profiler's
  ``record_function`` markers, no device work) are counted apart, ``non_aten_ops_per_train_step``;
* ``host_syncs_per_train_step``: ops that make the host wait for the device: ``_local_scalar_dense``
  (``.item()``, ``bool(t)``, ``int(t)``, Python ``if`` on a tensor), device-to-host copies, and the ops
  whose output shape depends on the data (``nonzero``, ``masked_select``, ``unique``, boolean-mask
  indexing, ...), which read a count back on a GPU even where a CPU run cannot show it;
* ``tensors_from_python_per_train_step``: tensors made from Python data (``torch.tensor(...)``,
  ``x[mask] = 0``'s scalar), which a captured graph would freeze at their capture-time value.

Then ``torch._dynamo.explain`` gives ``graph_breaks`` (its ``graph_break_count``) and the first break
reasons of the function ``torch.compile`` turns into one graph: the forward with both losses and L2
(``training_loss``) and the DCM update; AOTAutograd derives the backward graph from it, and the autograd
engine runs it. ``graph_breaks_whole_step`` is the same for the whole step, where ``loss.backward()``
always breaks the graph (unless dynamo traces autograd, an experimental mode whose gradients were wrong
here) and torch.optim breaks it around ``step()`` on purpose and never traces fused Adam
(torch/optim/optimizer.py, ``_use_grad``): the optimiser is compiled or captured on its own
(``torch.compile(opt.step)``, or a capturable fused Adam inside the CUDA graph).

The step is the model's own :meth:`~mnp.model.MNP.train_step` followed by the DCM update (what Lightning's
``on_train_batch_end`` runs); other models get the generic forward, backward, clip, step of
:func:`step_function`. ``python -m mnp.tools.bench`` records these fields for every case and model.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

# Output shape depends on the values: a GPU must copy a count back to the host before it can go on.
DATA_DEPENDENT = {
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "aten::unique_dim_consecutive",
    "aten::bincount",
    "aten::histogram",
    "aten::equal",
    "aten::_local_scalar_dense",
}
INDEXING = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_", "aten::_unsafe_index_put"}
COPIES = {"aten::_to_copy", "aten::copy_", "aten::to"}
BREAK_REASONS_KEPT = 5


def _is_mask(t) -> bool:
    return isinstance(t, Tensor) and t.dtype in (torch.bool, torch.uint8)


def sync_reason(name: str, args: tuple, kwargs: dict, out) -> str | None:
    """Why the op ``name`` (``aten::x``, no overload) forces a host sync, or None."""
    if name in DATA_DEPENDENT:
        return name
    if (
        name == "aten::repeat_interleave"
        and kwargs.get("output_size") is None
        and len(args) > 1
        and isinstance(args[1], Tensor)
    ):
        return name + " (tensor repeats)"
    if name in INDEXING and len(args) > 1 and any(_is_mask(i) for i in (args[1] or ())):
        return name + " (boolean mask)"
    if name in COPIES:
        src = args[1] if name == "aten::copy_" else args[0]
        dst = args[0] if name == "aten::copy_" else out
        if (
            isinstance(src, Tensor)
            and isinstance(dst, Tensor)
            and src.device.type != "cpu"
            and dst.device.type == "cpu"
        ):
            return name + " (device to host)"
    return None


class StepOps(TorchDispatchMode):
    """Counts the ATen ops dispatched while active, the host syncs among them and tensors made from
    Python data (see the module docstring); ``backward`` counts the ops run by the autograd engine."""

    def __init__(self):
        super().__init__()
        self.ops, self.other, self.syncs, self.from_python, self.backward = Counter(), Counter(), Counter(), 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._schema.name
        if not name.startswith("aten::"):
            self.other[name] += 1
            return out
        self.ops[name] += 1
        if torch._C._current_autograd_node() is not None:
            self.backward += 1
        if name == "aten::lift_fresh":
            self.from_python += 1
        reason = sync_reason(name, args, kwargs, out)
        if reason:
            self.syncs[reason] += 1
        return out

    def summary(self, top: int = 15) -> dict:
        return {
            "ops_per_train_step": sum(self.ops.values()),
            "backward_ops_per_train_step": self.backward,
            "non_aten_ops_per_train_step": sum(self.other.values()),
            "host_syncs_per_train_step": sum(self.syncs.values()),
            "host_sync_ops": dict(self.syncs.most_common()),
            "tensors_from_python_per_train_step": self.from_python,
            "top_ops": dict(self.ops.most_common(top)),
        }


def _where(path: str) -> str:
    """A source path shortened to its package and file (mnp/model/model.py, optim/adam.py)."""
    return "/".join(path.rsplit("/", 2)[-2:])


class _BreakLog(logging.Handler):
    """Collects dynamo's graph-break log records (the ``graph_breaks`` artifact): explain's own
    ``break_reasons`` miss the breaks inside nested frames."""

    def __init__(self):
        super().__init__()
        self.reasons: Counter = Counter()

    def emit(self, record) -> None:
        text = record.getMessage()
        where = re.search(r"in user code at (\S+):(\d+)", text)
        reason = re.search(r"Graph Break Reason: ([^\n]*)", text)
        context = re.search(r"Developer debug context: ([^\n]*)", text)
        if where and reason:
            detail = f" ({context.group(1).strip()[:120]})" if context else ""
            text = re.sub(r" at 0x[0-9a-f]+", "", f"{reason.group(1).strip()[:160]}{detail}")
            self.reasons[f"{text} at {_where(where.group(1))}:{where.group(2)}"] += 1


@contextlib.contextmanager
def _graph_break_log():
    handler = _BreakLog()
    logger = logging.getLogger("torch._dynamo.symbolic_convert.__graph_breaks")
    torch._logging.set_logs(graph_breaks=True)
    propagate, logger.propagate = logger.propagate, False
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        torch._logging.set_logs()


def graph_breaks(step: Callable[[], object]) -> dict:
    """``torch._dynamo.explain`` of ``step`` (run once): graphs, breaks and the first break reasons."""
    import torch._dynamo

    torch._dynamo.reset()
    try:
        with _graph_break_log() as log:
            ex = torch._dynamo.explain(step)()
    except Exception as e:  # a model dynamo cannot trace at all: say so instead of failing the benchmark
        return {"graph_breaks": None, "graph_break_error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    finally:
        torch._dynamo.reset()
    return {
        "graph_breaks": ex.graph_break_count,
        "graph_count": ex.graph_count,
        "graph_break_reasons": {k: v for k, v in log.reasons.most_common(BREAK_REASONS_KEPT)},
        "graph_break_reasons_total": sum(log.reasons.values()),
    }


def step_function(
    model,
    opt,
    views: Sequence[Tensor],
    y: Tensor,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> Callable[[], None]:
    """One training step of ``model`` on (views, y) with ``opt``, as Lightning would run it."""
    if hasattr(model, "train_step"):  # MNP: its own step, then the DCM update of on_train_batch_end

        def step():
            with autocast():
                model.train_step(views, y, opt)
            model.update_context_memory()

        return step

    def generic():  # forward, backward, clipping, optimiser step (and an older MNP's DCM update)
        with autocast():
            loss, _ = model.training_loss(views, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip := model.hparams.get("clip_norm"):  # baselines: none; an MNP from before the parts: flat
            model.configure_gradient_clipping(opt, clip)
        opt.step()
        if hasattr(model, "update_context_memory"):
            model.update_context_memory()

    return generic


def main_optimizer(model):
    """The model's first optimiser (MNP: the main one), from its ``configure_optimizers``."""
    opt = model.configure_optimizers()
    opt = opt[0] if isinstance(opt, (list, tuple)) else opt
    return opt["optimizer"] if isinstance(opt, dict) else opt


def loss_function(
    model,
    views: Sequence[Tensor],
    y: Tensor,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> Callable[[], None]:
    """The part of the step ``torch.compile`` compiles: the forward and the losses, then (MNP) the DCM update."""

    def fn():
        with autocast():
            model.training_loss(views, y)
        if hasattr(model, "update_context_memory"):
            model.update_context_memory()

    return fn


def measure_step(
    model,
    opt,
    views: Sequence[Tensor],
    y: Tensor,
    explain: bool = True,
    whole_step: bool = True,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict:
    """Ops, host syncs and (``explain``) graph breaks of one steady-state training step; the model takes
    three steps (warm-up, counted, the whole step explained) and one more forward (explained)."""
    model.train()
    step = step_function(model, opt, views, y, autocast)
    step()  # warm-up: optimiser state, cached flags
    mode = StepOps()
    with mode:
        step()
    out = mode.summary()
    if explain:
        out.update(graph_breaks(loss_function(model, views, y, autocast)))
        if whole_step:
            out.update({f"{k}_whole_step": v for k, v in graph_breaks(step).items()})
    return out


def measure_case(
    model,
    dm,
    device: torch.device,
    batch: int,
    explain: bool = True,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict:
    """:func:`measure_step` on the first ``batch`` training rows of a datamodule, with the model's main
    optimiser; the model's parameters are restored afterwards (the optimiser's state is not reused)."""
    model.to(device)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    trainer, model._trainer = model._trainer, None  # the step on its own, as a CUDA graph would run it
    capturable = getattr(model, "capturable", None)
    if capturable is not None:
        model.capturable = True
    opt = main_optimizer(model)
    views, y = [v[:batch].to(device) for v in dm.train_views], dm.train_y[:batch].to(device)
    try:
        return {
            **measure_step(model, opt, views, y, explain, autocast=autocast),
            **({} if capturable is None else {"capturable": True}),
        }
    finally:
        model.load_state_dict(saved)
        model._trainer = trainer
        if capturable is not None:
            model.capturable = capturable
        if hasattr(model, "clear_context_cache"):
            model.clear_context_cache()


def markdown(cases: list[dict]) -> str:
    """A table of the step metrics of the cases that have them."""
    rows = [c for c in cases if "ops_per_train_step" in c]
    if not rows:
        return ""
    out = [
        "### one training step: ATen ops, host syncs, graph breaks (what a CUDA graph capture needs)",
        "",
        "| dataset | model | ops (backward) | host syncs | which | graph breaks (whole step) |",
        "|---|---|---|---|---|---|",
    ]
    for c in rows:
        which = ", ".join(f"{k} ×{v}" for k, v in c["host_sync_ops"].items()) or "–"
        out.append(
            f"| {c['dataset']} | {c['model']} | {c['ops_per_train_step']} ({c['backward_ops_per_train_step']}) | "
            f"{c['host_syncs_per_train_step']} | {which} | {c.get('graph_breaks', '–')} "
            f"({c.get('graph_breaks_whole_step', '–')}) |"
        )
    return "\n".join(out)


def comparison_table(before: dict, after: dict) -> str:
    """Markdown table of the step metrics of two benchmark results (``python -m mnp.tools.bench --json``), by dataset."""
    was = {(c["dataset"], c["model"]): c for c in before["cases"] if "ops_per_train_step" in c}
    out = [
        "| dataset | model | ATen ops before → after (backward) | host syncs before → after | "
        "graph breaks before → after (whole step) |",
        "|---|---|---|---|---|",
    ]
    for c in after["cases"]:
        b = was.get((c["dataset"], c["model"]))
        if b is None or "ops_per_train_step" not in c:
            continue
        out.append(
            f"| {c['dataset']} | {c['model']} | {b['ops_per_train_step']} ({b['backward_ops_per_train_step']}) → "
            f"{c['ops_per_train_step']} ({c['backward_ops_per_train_step']}) | "
            f"{b['host_syncs_per_train_step']} → {c['host_syncs_per_train_step']} | "
            f"{b.get('graph_breaks', '–')} ({b.get('graph_breaks_whole_step', '–')}) → "
            f"{c.get('graph_breaks', '–')} ({c.get('graph_breaks_whole_step', '–')}) |"
        )
    return "\n".join(out)


if __name__ == "__main__":  # python -m mnp.tools.bench.step_metrics [BEFORE.json AFTER.json]: the table of docs/gpu.md
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "benchmarks"
    paths = sys.argv[1:3] or [root / "step_metrics_before.json", root / "step_metrics.json"]
    print(comparison_table(*(json.loads(Path(p).read_text()) for p in paths)))
