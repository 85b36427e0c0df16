"""Golden training runs of MNP's step (tests/data/step_golden.pt), written by the eager step of commit
5aef3e4 (before the step was made sync-free and batched): with that commit's ``mnp`` package first on the
path (``git archive 5aef3e4 mnp datamodules conf | tar -x -C /tmp/old``), ``PYTHONPATH=/tmp/old python
tests/step_golden.py`` rewrites the file.

Each case: a model built from ``CASES[name]``, its memory filled from ``data()``, the main optimiser of
``configure_optimizers`` and ``STEPS`` steps of forward, backward, per-tensor clipping, optimiser step
and DCM update, each after ``torch.manual_seed(step)`` (the Monte Carlo draws). The file keeps the
losses, the gradients of the first step (after clipping) and the final state_dict (parameters, memory,
buffers), each flattened into one tensor."""

from __future__ import annotations

from pathlib import Path

import torch

GOLDEN = Path(__file__).parent / "data" / "step_golden.pt"
STEPS = 3
DIMS, K = (24, 8, 22, 5, 7, 2), 4  # six views of different widths, like handwritten's (240, 76, 216, 47, 64, 6)
BASE = dict(
    num_classes=K,
    view_dims=list(DIMS),
    d_e=8,
    memory_size=12,
    projection="linear",
    norm="layer",
    clip_norm=0.05,
    l2=2e-5,
    lengthscale_form="l",
    optim={"lr": 3e-3},
)
CASES = {
    "handwritten_like": {},
    "raw_features": dict(
        projection="none",
        norm="batch",
        prior="shared",
        merge="sum",
        amplitude=True,
        memory_update="ce",
        memory_jstar="same_class",
        lengthscale_param="exp",
        clip_norm=None,
        rbf_reduce="sum",
        lengthscale_penalty="half_sq",
        self_in_denominator=True,
    ),
    "trainable_fifo": dict(
        memory_trainable=True,
        memory_init="uniform",
        memory_update="fifo",
        memory_write="before_step",
        aggregation="mean",
        ty_loss="mean_ce",
        sigma_as_std=True,
    ),
    "resmlp_concat": dict(
        projection="resmlp",
        resmlp_depth=2,
        aggregation="concat",
        attention_norm="softmax",
        similarity="dot",
        memory_jstar="same_class",
        optim={"lr": 1e-3, "eps": 1e-7, "eps_placement": "keras"},
    ),
}


def data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % K
    return [torch.randn(n, d, generator=g) + y[:, None].float() for d in DIMS], y


def build(name: str, fast: bool = True):
    from mnp_utils import flat_mnp

    torch.manual_seed(0)
    model = flat_mnp(**{**BASE, **CASES[name]}, fast=fast)
    views, y = data(60, seed=1)
    model.init_memory(views, y)
    opt = model.configure_optimizers()
    opt = opt[0] if isinstance(opt, list) else opt
    return model, opt["optimizer"]


def eager_step(model, opt, views, y) -> torch.Tensor:
    """The step as MNP.training_step ran it at d07fc52 (Lightning's logging and finite check aside)."""
    loss, _ = model.training_loss(views, y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    model.configure_gradient_clipping(opt, model.spec.optim.clip_norm)
    if model.spec.memory.write == "before_step":
        model.update_context_memory()
    opt.step()
    model.on_train_batch_end(None, None, 0)
    return loss.detach()


def run(name: str, step_fn=eager_step, fast: bool = True) -> dict:
    model, opt = build(name, fast)
    model.train()
    losses, grads = [], {}
    for step in range(STEPS):
        views, y = data(20, seed=10 + step)
        torch.manual_seed(step)
        losses.append(step_fn(model, opt, views, y))
        if step == 0:
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    state = model.state_dict()
    return {
        "losses": torch.stack(losses),
        "keys": list(state),
        "shapes": [tuple(v.shape) for v in state.values()],
        "state": torch.cat([v.detach().float().flatten() for v in state.values()]),
        "grad_keys": list(grads),
        "grad_shapes": [tuple(g.shape) for g in grads.values()],
        "grads": torch.cat([g.flatten() for g in grads.values()]),
    }


def unflatten(result: dict, what: str = "state") -> dict:
    """The state_dict (``state``) or the first step's gradients (``grads``) of a :func:`run` result."""
    keys, shapes = (
        (result["keys"], result["shapes"]) if what == "state" else (result["grad_keys"], result["grad_shapes"])
    )
    sizes = [int(torch.Size(s).numel()) for s in shapes]
    return {k: t.reshape(s) for k, t, s in zip(keys, result[what].split(sizes), shapes)}


if __name__ == "__main__":
    torch.set_num_threads(1)
    GOLDEN.parent.mkdir(exist_ok=True)
    torch.save({name: run(name) for name in CASES}, GOLDEN)
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size} bytes)")
