"""MNP's optimisation: the optimisers, the warm-up, per-tensor clipping and the capturable training step.

Optimisation is manual so that the optional contrastive-only warm-up (official code) has its own
Adam: the first ``warmup_epochs`` epochs minimise L_RBF alone with a linearly decayed learning rate,
then the main Adam (``optim``, :func:`mnp.framework.optim.make_optimizer`) takes over, its schedule counted
from the end of the warm-up. Both optimisers and the schedule live in the checkpoint (the warm-up Adam's
moments only until the warm-up is over).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor, nn

from mnp.framework.optim import keras_eps_, set_lr
from mnp.model.losses import supervised_contrastive
from mnp.model.step_graphs import StepGraphs, blockers


def clip_per_tensor(params: Iterable[Tensor], max_norm: float, fast: bool = True) -> None:
    """Scale each gradient tensor separately to norm ≤ ``max_norm`` (tf.clip_by_norm, official code).

    ``fast``: all norms and scalings in two foreach kernels; otherwise one tensor at a time.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    if not fast:
        for g in grads:
            g.mul_(max_norm / g.norm().clamp_min(max_norm))
        return
    norms = torch.stack(torch._foreach_norm(grads))
    torch._foreach_mul_(grads, list((max_norm / norms.clamp_min(max_norm)).unbind()))


class SumOfSquares(torch.autograd.Function):
    """Σ_i ‖w_i‖² of a list of tensors with foreach kernels; the gradient of w_i is 2·w_i."""

    @staticmethod
    def forward(ctx, *ws: Tensor) -> Tensor:
        ctx.save_for_backward(*ws)
        return torch.stack(torch._foreach_norm(ws)).pow(2).sum()

    @staticmethod
    def backward(ctx, grad: Tensor):
        return tuple(torch._foreach_mul(list(ctx.saved_tensors), 2 * grad))


class MNPTraining:
    """The Lightning training hooks of :class:`mnp.model.MNP`, a mixin placed before Routine.

    A mixin because Lightning calls its hooks on the module itself. Uses the model's ``spec`` (its parts'
    settings), ``encoders``, ``similarity``, ``memory``, ``encoder_stacks``, ``training_loss``, ``update_context_memory``
    (DCM write), ``clear_context_cache`` and the ``_loss_bad`` buffer; gives it L_RBF, the L2 penalty, and at fit
    start the memory's initialisation and the captured step (mnp.model.step_graphs).
    """

    def on_fit_start(self) -> None:
        data = self._training_set()
        if self.memory.needs_data():
            if data is None:
                raise RuntimeError(
                    "the context memory needs the training set: fit with a datamodule that has "
                    "train_views/train_y, or call model.init_memory(train_views, train_y) first"
                )
            self.init_memory(*data)
        elif data is not None:
            self.memory.attach(*data)
        self._step_graphs = None
        if self.cuda_graph:
            if reasons := self.capture_blockers(self.cuda_graph, self.trainer):
                raise ValueError("accel.cuda_graph cannot capture this model's step: " + "; ".join(reasons))
            self.capturable = True
            self._step_graphs = StepGraphs(self, self.cuda_graph == "emulate")

    def capture_blockers(self, graph: bool | str, trainer) -> list[str]:
        """Why the training step cannot be captured with ``accel.cuda_graph=graph`` (empty: it can;
        mnp.model.step_graphs)."""
        return blockers(self, graph, trainer)

    def on_fit_end(self) -> None:
        self._step_graphs = None  # frees the graphs and their memory pool

    def in_warmup(self) -> bool:
        """Whether this epoch is of the warm-up (L_RBF alone; ``warmup.epochs`` of them), not MNP's main training."""
        epochs = self.spec.warmup.epochs
        return epochs > 0 and self._trainer is not None and self.current_epoch < epochs

    def _warmup_parameters(self) -> list[nn.Parameter]:
        params = [p for enc in self.encoders for p in enc.projection.parameters()]
        return params + list(self.similarity.parameters())

    def _param_groups(self, params: list[nn.Parameter], lr: float) -> list[dict]:
        """Adam parameter groups: l and σ_f at ``lr·lengthscale_lr_scale``, the rest at ``lr``."""
        scale = self.spec.optim.lengthscale_lr_scale
        mine = {id(p) for p in self.similarity.parameters()}
        groups = [
            {"params": [p for p in params if id(p) not in mine], "lr": lr, "lr_scale": 1.0},
            {"params": [p for p in params if id(p) in mine], "lr": lr * scale, "lr_scale": scale},
        ]
        return [g for g in groups if g["params"]]

    def _rbf_loss(self, targets: list[Tensor], y: Tensor) -> Tensor:
        """L_RBF = reduce_m L^m_CL + α reduce_m penalty(l^m) (eq. 10 and Section 3.3)."""
        loss = self.spec.loss
        cl = supervised_contrastive(self.similarity(targets, targets), y, loss.tau, loss.self_in_denominator)
        pen = self.similarity.penalty(loss.lengthscale_penalty)
        if loss.rbf_reduce == "sum":
            return cl.sum() + loss.alpha * pen.sum()
        return cl.mean() + loss.alpha * pen.mean()

    def _l2_penalty(self) -> Tensor | float:
        l2 = self.spec.loss.l2
        if not l2:
            return 0.0
        kernels = [m.weight for m in self.modules() if isinstance(m, nn.Linear) and m.weight.requires_grad]
        if (
            stacks := self.encoder_stacks.get()
        ) is not None and self.encoder_stacks.context:  # the encoders' kernels: two stacks
            stacked = {id(w) for w in stacks.members("fc1.weight") + stacks.members("fc2.weight")}
            kernels = [w for w in kernels if id(w) not in stacked] + [
                stacks[k] for k in ("fc1.weight", "fc2.weight") if stacks[k].requires_grad
            ]
        if self.spec.fast:
            return l2 * SumOfSquares.apply(*kernels)
        return l2 * sum(w.pow(2).sum() for w in kernels)

    def configure_optimizers(self):
        optim, warmup = self.spec.optim, self.spec.warmup
        total = self.trainer.max_epochs if self._trainer is not None and (self.trainer.max_epochs or 0) > 0 else 100
        params = [p for p in self.parameters() if p.requires_grad]
        fused = self.spec.fast and all(p.device.type in ("cpu", "cuda") for p in params) or None
        main = optim.build(self._param_groups(params, optim.lr), max(total - warmup.epochs, 1), fused)
        main["optimizer"].register_step_post_hook(self._after_optimizer_step)
        if warmup.epochs <= 0:
            return main
        warm = torch.optim.Adam(
            self._param_groups(self._warmup_parameters(), warmup.lr), lr=warmup.lr, eps=optim.eps, fused=fused
        )
        if optim.eps_placement == "keras":
            keras_eps_(warm)
        warm.register_step_post_hook(self._after_optimizer_step)
        return [main, {"optimizer": warm}]

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Past the warm-up, its optimiser never steps again: its Adam moments are left out (on CUB 5.4 of 67 MB)."""
        super().on_save_checkpoint(checkpoint)
        states = checkpoint.get("optimizer_states") or []
        if len(states) > 1 and self._trainer is not None and not self.in_warmup():
            states[1] = {**states[1], "state": {}}

    def _after_optimizer_step(self, optimizer, args, kwargs) -> None:
        self.clear_context_cache()  # fused Adam updates the parameters without bumping their versions

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Per-tensor norm clipping (each parameter's gradient on its own, as tf.clip_by_norm)."""
        if gradient_clip_val:
            clip_per_tensor(
                (p for g in optimizer.param_groups for p in g["params"]), float(gradient_clip_val), self.spec.fast
            )

    def training_step(self, batch, batch_idx):
        """Lightning's step: the warm-up's learning rate, :meth:`train_step`, the finite-loss check and logging."""
        views, y = batch
        warm = self.in_warmup()
        opts = self.optimizers()
        opts = opts if isinstance(opts, list) else [opts]
        opt = opts[1] if warm else opts[0]
        if warm:  # linear decay from warmup.lr to warmup.lr·warmup.end_factor over the warm-up
            warmup, n = self.spec.warmup, self.trainer.num_training_batches
            frac = (self.current_epoch + (batch_idx / n if 0 < n < float("inf") else 0.0)) / warmup.epochs
            for g in opt.param_groups:
                set_lr(g, g["lr_scale"] * warmup.lr * (1.0 - (1.0 - warmup.end_factor) * frac))
        step = self.global_step
        if self._step_graphs is not None:  # accel.cuda_graph: mnp.model.step_graphs
            loss, logs = self._step_graphs.step(views, y, opt, warm)
        else:
            loss, logs = self.train_step(views, y, opt)
        if self.check_finite_every and step % self.check_finite_every == 0:
            self._raise_if_nonfinite(loss, step)
        bs = y.shape[0]
        self.log("train/loss", loss, prog_bar=True, on_step=False, on_epoch=True, batch_size=bs)
        for k, v in logs.items():
            self.log(f"train/{k}", v, on_step=False, on_epoch=True, batch_size=bs)
        return loss

    def train_step(
        self, views: Sequence[Tensor], y: Tensor, opt, hooks: bool = True
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """One optimisation step: forward, L = L_TY + β L_RBF (+ L2), backward, per-tensor clipping (not in
        the warm-up), the DCM write of memory_write=before_step, and ``opt.step()``.

        No host sync and no tensor made from Python data (with ``capturable``, or on a GPU): the step can
        be captured as one CUDA graph (mnp.tools.bench.step_metrics counts both). A non-finite loss sets a device flag,
        read by :meth:`training_step` every ``check_finite_every`` steps; while it is set, a fused Adam (the
        fast path) skips its updates, so the parameters stay finite until the read stops the run. The DCM
        write of memory_write=after_step (paper) follows in ``on_train_batch_end``, as Lightning calls it.
        ``hooks=False``: a plain ``loss.backward()`` without Lightning's backward hooks (inside a CUDA graph).
        """
        warm = self.in_warmup()
        loss, logs = self.training_loss(views, y)
        with torch.no_grad():
            self._loss_bad.logical_or_(loss - loss != 0)  # true for nan and ±inf
        self.zero_grad(set_to_none=True)
        if self._trainer is not None and hooks:
            self.manual_backward(loss)
        else:
            loss.backward()
        if not warm:
            self.configure_gradient_clipping(opt, self.spec.optim.clip_norm)
        if self.spec.memory.write == "before_step":
            self.update_context_memory()  # official: the new rows are written before apply_gradients
        inner = getattr(opt, "optimizer", opt)  # Lightning wraps the torch optimiser
        if inner.defaults.get("fused"):
            inner.found_inf = self._loss_bad  # fused Adam skips its update while the flag is set, without a sync
        opt.step()
        return loss, logs

    def _raise_if_nonfinite(self, loss: Tensor | None, step: int) -> None:
        """Read the device flag of :meth:`train_step` (one host sync) and stop on a non-finite loss; with
        check_finite_every = N > 1 the flag covers the N steps since the last read."""
        if not bool(self._loss_bad):
            return
        every = self.check_finite_every
        when = f"global step {step}" if every == 1 else f"one of global steps {max(step - every + 1, 0)}..{step}"
        value = "" if loss is None else f" ({loss.item()})"
        raise FloatingPointError(
            f"non-finite training loss{value} at epoch {self.current_epoch}, {when}; the last good checkpoint is kept"
        )

    def _schedulers(self) -> list:
        sched = self.lr_schedulers()
        return sched if isinstance(sched, list) else [sched] if sched is not None else []

    def close_epoch_timer(self) -> None:
        if self.in_warmup():  # time/train_epoch_s reports MNP epochs, not the warm-up
            self._epoch_start = None
            return
        super().close_epoch_timer()

    def on_train_start(self) -> None:
        """Catch the schedule up with the epoch counter: a last.ckpt written before the epoch-end step (by
        runs before checkpointing moved to ModelCheckpoint) would otherwise repeat one epoch's learning rate."""
        done = self.current_epoch - self.spec.warmup.epochs  # main epochs completed
        for s in self._schedulers():
            while s.last_epoch < done:
                s.step()

    def on_train_epoch_end(self) -> None:
        if self.check_finite_every > 1:  # the steps since the last periodic read, before the epoch's checkpoint
            self._raise_if_nonfinite(None, self.global_step - 1)
        self.log("train/phase", 0.0 if self.in_warmup() else 1.0)  # 0: the warm-up (L_RBF alone), 1: main
        super().on_train_epoch_end()
        if not self.in_warmup():
            for s in self._schedulers():
                s.step()
