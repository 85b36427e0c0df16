"""The forward pieces MNP's training and prediction share, as a mixin of :class:`mnp.model.MNP`: the memory's
context projected and encoded (eqs. 4, 6), the attention (eq. 9), the target-specific r*, s* (eq. 5), eq. 8′'s view
weights and their reference d²_ref, and :meth:`MNPForward.explain`, all of them at once for one batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor
from torch.profiler import record_function

from mnp.model.attention import normalise, topk_hint
from mnp.model.encoders import encode_stacked, project_stacked


class Explanation(NamedTuple):
    """What :meth:`MNP.explain` shows of one batch, per view m: the projected targets and contexts, the context
    encodings r (M, N, d_e) and s (float32), the attention scores (M, B, N) before normalisation and the attention A
    (eq. 9), the target-specific r*, s* (M, B, d_e, eq. 5), the priors u, q (M, 1, d_e) and eq. 8′'s view weights
    (B, M; None: eq. 8, unweighted)."""

    targets: Sequence[Tensor] | Tensor
    contexts: Sequence[Tensor] | Tensor
    r: Tensor
    s: Tensor
    scores: Tensor
    attention: Tensor
    r_star: Tensor
    s_star: Tensor
    u: Tensor
    q: Tensor
    view_weights: Tensor | None


class MNPForward:
    """The forward pieces of :class:`mnp.model.MNP`, a mixin placed before :class:`mnp.model.training.MNPTraining`.

    A mixin because the model's prediction and training loss call the pieces as its methods. Uses the model's ``spec``, ``encoders``,
    ``encoder_stacks``, ``similarity``, ``attention_norm``, ``memory``, ``context_cache``, ``view_weighting`` and the
    ``distance_ref`` buffer, and sets the partial-sort hint ``_sparsemax_k``.
    """

    def _attend(self, views: Sequence[Tensor]):
        """Projected targets, attention A (M, B, N), r*, s* (M, B, d_e) and priors u, q (M, 1, d_e).

        s*, q (the variances) and A stay float32 under autocast.
        """
        targets, _, attn, r_star, s_star, u, q = self._attend_scores(views)
        return targets, attn, r_star, s_star, u, q

    def _attend_scores(self, views: Sequence[Tensor]):
        """:meth:`_attend` with the similarity scores (M, B, N) before normalisation, second."""
        if self.memory.needs_data():
            raise RuntimeError(
                "the context memory is empty: fit the model or call model.init_memory(train_views, train_y)"
            )
        cached = self.context_cache.get(views[0], self._caches_context())
        with record_function("mnp.project_and_encode"):
            if cached is None:
                targets, (contexts, r_all, s_all, u, q) = self._encode(views)
            else:
                targets, (contexts, r_all, s_all, u, q) = self._project(views), cached
        with record_function("mnp.attention"):
            k = None if self.capturable else self._sparsemax_k
            scores = self.similarity(targets, contexts)
            attn = normalise(scores, self.attention_norm, k)  # eq. 9
            if (
                self.spec.fast
                and self.attention_norm == "sparsemax"
                and attn.device.type == "cpu"
                and not self.capturable
            ):
                self._sparsemax_k = topk_hint(attn)  # CPU: partial sorts beat a full sort for large N^m
            r_star = attn.to(r_all.dtype) @ r_all  # eq. 5
            with torch.autocast(attn.device.type, enabled=False):
                s_star = attn @ s_all
        return targets, scores, attn, r_star, s_star, u, q

    def _encode(self, views: Sequence[Tensor]):
        """Project targets and context together; encode the context (eqs. 4 and 6).

        Returns the projected targets and (projected contexts, r (M, N, d_e), s (M, N, d_e) float32,
        u (M, 1, d_e), q (M, 1, d_e) float32).
        """
        ctx_x, _ = self.memory.context()
        y_onehot = self.memory.labels_onehot.to(views[0].dtype)  # the context's labels, (N, K)
        b = views[0].shape[0]
        h = self._project([torch.cat([x, c.to(x.dtype)]) for x, c in zip(views, ctx_x)])
        targets, contexts = (
            h[:, :b] if isinstance(h, Tensor) else [x[:b] for x in h],
            h[:, b:] if isinstance(h, Tensor) else [x[b:] for x in h],
        )
        if (
            stacks := self.encoder_stacks.get()
        ) is not None and self.encoder_stacks.context:  # eqs. 4 and 6, all modalities at once
            c = contexts if isinstance(contexts, Tensor) else torch.stack(contexts)
            enc = self.spec.encoder
            roles = 4 if enc.prior == "separate" else 2
            r, s, u, q = encode_stacked(
                stacks,
                c,
                y_onehot,
                roles,
                enc.norm_eps,
                enc.norm,
                self.encoders[0].enc_r.norm.training,
                enc.bn_momentum,
            )
            context = (contexts, r, s.float(), u, q.float())
        else:
            rs, ss, us, qs = [], [], [], []
            for enc, c in zip(self.encoders, contexts):
                r, s, u, q = enc.represent(c, y_onehot)  # eqs. 4 and 6
                rs.append(r), ss.append(s.float()), us.append(u), qs.append(q.float())
            context = (contexts, torch.stack(rs), torch.stack(ss), torch.stack(us)[:, None], torch.stack(qs)[:, None])
        self.context_cache.put(views[0], context, self._caches_context())
        return targets, context

    def _project(self, xs: Sequence[Tensor]) -> Tensor | list[Tensor]:
        """Every modality's input projection: one batched matmul (M, rows, d_e) on the fast path with linear
        projections, else a list of (rows, d_x)."""
        if (stacks := self.encoder_stacks.get()) is not None and self.encoder_stacks.projection:
            return project_stacked([enc.projection[0].weight for enc in self.encoders], stacks["projection.bias"], xs)
        return [enc.project(x) for enc, x in zip(self.encoders, xs)]

    def _caches_context(self) -> bool:
        return self.spec.fast and not self.training

    @torch.no_grad()
    def explain(self, views: Sequence[Tensor]) -> Explanation:
        """The encodings, attention, posteriors and view weights of ``views`` (:class:`Explanation`), as the model
        computes them to predict: what the diagnosis, Figure 2 and the benchmarks read."""
        _, (contexts, r_all, s_all, _, _) = self._encode(views)
        targets, scores, attn, r_star, s_star, u, q = self._attend_scores(views)
        return Explanation(
            targets, contexts, r_all, s_all, scores, attn, r_star, s_star, u, q, self._view_weights(scores)
        )

    # ------------------------------------------------------------------ eq. 8′ (mnp.model.view_weighting)
    def _view_weights(self, scores: Tensor, present: Tensor | None = None) -> Tensor | None:
        """MBA weights (B, M) of eq. 8′ from the attention scores (M, B, N), over the ``present`` views (B, M) only
        when given; None: eq. 8 (unweighted, every view). Training is unweighted."""
        settings = self.spec.aggregation.view_weighting
        if settings.mode == "none" or self.training:
            return present
        if torch.isnan(
            self.distance_ref
        ).any():  # not fitted yet (validation of the first epoch): from the training set
            self.update_distance_reference()
        return self.view_weighting.weights(scores, self.distance_ref, settings.power, present)

    @torch.no_grad()
    def update_distance_reference(self, train_views: Sequence[Tensor] | None = None) -> None:
        """Set eq. 8′'s d²_ref from ``train_views`` (default: the training set attached to the memory)."""
        if train_views is None:
            if self.memory._source is None:
                raise RuntimeError(
                    "view_weighting=distance has no reference distance yet: fit the model, or call "
                    "model.update_distance_reference(train_views)"
                )
            train_views = self.memory._source[0]
        was_training = self.training
        self.eval()
        try:
            views = [torch.as_tensor(v, dtype=torch.float32, device=self.device) for v in train_views]
            quantile = self.spec.aggregation.view_weighting.quantile
            self.distance_ref.copy_(
                self.view_weighting.reference(lambda vs: self._attend_scores(vs)[1], views, quantile)
            )
        finally:
            self.train(was_training)
