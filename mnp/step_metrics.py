"""What stands between a training step and one CUDA graph: its ATen ops, host syncs and graph breaks.

One steady-state training step (after a warm-up step that creates the optimiser state) is run under a
:class:`StepOps` dispatch mode, which counts

* ``ops_per_train_step``: every ATen op dispatched (forward, losses, backward, clipping, L2, the
  optimiser step and the DCM memory update), by name;
* ``host_syncs_per_train_step``: ops that make the host wait for the device: ``_local_scalar_dense``
  (``.item()``, ``bool(t)``, ``int(t)``, Python ``if`` on a tensor), device-to-host copies, and the ops
  whose output shape depends on the data (``nonzero``, ``masked_select``, ``unique``, boolean-mask
  indexing, ...), which read a count back on a GPU even where a CPU run cannot show it;
* ``tensors_from_python_per_train_step``: tensors made from Python data (``torch.tensor(...)``,
  ``x[mask] = 0``'s scalar), which a captured graph would freeze at their capture-time value.

Then ``torch._dynamo.explain`` runs the same step function once more and gives ``graph_breaks`` (its
``graph_break_count``) and the first break reasons. ``torch._dynamo.config.trace_autograd_ops`` is set,
so that ``loss.backward()`` is traced instead of always breaking the graph; the optimiser's own
``torch._dynamo.graph_break()`` around ``step`` (PyTorch's choice, see torch/optim/optimizer.py) shows up
in the reasons but splits nothing unless ops follow it.

The step is the model's own :meth:`~mnp.model.MNP.train_step` followed by the DCM update (what Lightning's
``on_train_batch_end`` runs); other models get the generic forward, backward, clip, step of
:func:`mnp.bench.manual_step`. ``python -m mnp.bench`` records these fields for every case and model.
"""
from __future__ import annotations

import contextlib
from collections import Counter
from typing import Callable, Sequence

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Output shape depends on the values: a GPU must copy a count back to the host before it can go on.
DATA_DEPENDENT = {"aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique", "aten::_unique2",
                  "aten::unique_dim", "aten::unique_consecutive", "aten::unique_dim_consecutive",
                  "aten::bincount", "aten::histogram", "aten::equal", "aten::_local_scalar_dense"}
INDEXING = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_", "aten::_unsafe_index_put"}
COPIES = {"aten::_to_copy", "aten::copy_", "aten::to"}
BREAK_REASONS_KEPT = 5


def _is_mask(t) -> bool:
    return isinstance(t, Tensor) and t.dtype in (torch.bool, torch.uint8)


def sync_reason(name: str, args: tuple, kwargs: dict, out) -> str | None:
    """Why the op ``name`` (``aten::x``, no overload) forces a host sync, or None."""
    if name in DATA_DEPENDENT:
        return name
    if name == "aten::repeat_interleave" and kwargs.get("output_size") is None and len(args) > 1 \
            and isinstance(args[1], Tensor):
        return name + " (tensor repeats)"
    if name in INDEXING and len(args) > 1 and any(_is_mask(i) for i in (args[1] or ())):
        return name + " (boolean mask)"
    if name in COPIES:
        src = args[1] if name == "aten::copy_" else args[0]
        dst = args[0] if name == "aten::copy_" else out
        if isinstance(src, Tensor) and isinstance(dst, Tensor) and src.device.type != "cpu" and dst.device.type == "cpu":
            return name + " (device to host)"
    return None


class StepOps(TorchDispatchMode):
    """Counts the ATen ops dispatched while active, the host syncs among them and tensors made from
    Python data (see the module docstring); ``backward`` counts the ops run by the autograd engine."""

    def __init__(self):
        super().__init__()
        self.ops, self.syncs, self.from_python, self.backward = Counter(), Counter(), 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._schema.name
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
        return {"ops_per_train_step": sum(self.ops.values()), "backward_ops_per_train_step": self.backward,
                "host_syncs_per_train_step": sum(self.syncs.values()), "host_sync_ops": dict(self.syncs.most_common()),
                "tensors_from_python_per_train_step": self.from_python,
                "top_ops": dict(self.ops.most_common(top))}


def _short_reason(reason) -> str:
    text = str(getattr(reason, "reason", reason)).strip().splitlines()[0][:200]
    stack = getattr(reason, "user_stack", None) or []
    if stack:
        f = stack[-1]
        text += f" [{'/'.join(f.filename.rsplit('/', 2)[-2:])}:{f.lineno}]"
    return text


def graph_breaks(step: Callable[[], object]) -> dict:
    """``torch._dynamo.explain`` of ``step`` (run once): graphs, breaks and the first break reasons."""
    import torch._dynamo
    torch._dynamo.reset()
    try:
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            ex = torch._dynamo.explain(step)()
    except Exception as e:  # a model dynamo cannot trace at all: say so instead of failing the benchmark
        return {"graph_breaks": None, "graph_break_error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    finally:
        torch._dynamo.reset()
    reasons = list(dict.fromkeys(_short_reason(r) for r in ex.break_reasons))
    return {"graph_breaks": ex.graph_break_count, "graph_count": ex.graph_count,
            "graph_break_reasons": reasons[:BREAK_REASONS_KEPT], "graph_break_reasons_total": len(reasons),
            "dynamo_config": {"trace_autograd_ops": True}}


def step_function(model, opt, views: Sequence[Tensor], y: Tensor,
                  autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> Callable[[], None]:
    """One training step of ``model`` on (views, y) with ``opt``, as Lightning would run it."""
    if hasattr(model, "train_step"):  # MNP: its own step, then the DCM update of on_train_batch_end
        def step():
            with autocast():
                model.train_step(views, y, opt)
            model._update_memory()
        return step
    from mnp.bench import manual_step
    dev = views[0].device

    def generic():
        with autocast():
            manual_step(model, opt, views, y, "32-true", dev)
    return generic


def measure_step(model, opt, views: Sequence[Tensor], y: Tensor, explain: bool = True,
                 autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> dict:
    """Ops, host syncs and (``explain``) graph breaks of one steady-state training step; the model takes
    three steps (warm-up, counted, explained)."""
    model.train()
    step = step_function(model, opt, views, y, autocast)
    step()  # warm-up: optimiser state, cached flags
    mode = StepOps()
    with mode:
        step()
    out = mode.summary()
    if explain:
        out.update(graph_breaks(step))
    return out


def measure_case(model, dm, device: torch.device, batch: int, explain: bool = True,
                 autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> dict:
    """:func:`measure_step` on the first ``batch`` training rows of a datamodule, with the model's main
    optimiser; the model's parameters are restored afterwards (the optimiser's state is not reused)."""
    from mnp.bench import first_optimizer
    model.to(device)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    opt = first_optimizer(model)
    views, y = [v[:batch].to(device) for v in dm.train_views], dm.train_y[:batch].to(device)
    try:
        return measure_step(model, opt, views, y, explain, autocast)
    finally:
        model.load_state_dict(saved)
        if hasattr(model, "clear_context_cache"):
            model.clear_context_cache()


def markdown(cases: list[dict]) -> str:
    """A table of the step metrics of the cases that have them."""
    rows = [c for c in cases if "ops_per_train_step" in c]
    if not rows:
        return ""
    out = ["### one training step: ATen ops, host syncs, graph breaks (what a CUDA graph capture needs)", "",
           "| dataset | model | ops (backward) | host syncs | which | graph breaks |", "|---|---|---|---|---|---|"]
    for c in rows:
        which = ", ".join(f"{k} ×{v}" for k, v in c["host_sync_ops"].items()) or "–"
        out.append(f"| {c['dataset']} | {c['model']} | {c['ops_per_train_step']} ({c['backward_ops_per_train_step']}) | "
                   f"{c['host_syncs_per_train_step']} | {which} | {c.get('graph_breaks', '–')} |")
    return "\n".join(out)
