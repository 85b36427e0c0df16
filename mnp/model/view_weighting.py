"""Distance-aware view weighting (docs/method.md §4.1, eq. 8′): a view counts less in MBA the farther a
target is from that view's context.

Sparsemax ignores a constant shift of the scores, so eq. 9's attention over a target far from every
context point looks like the attention over a near one, and eq. 8 gives the view the same precision
1/s* + 1/q either way: a destroyed view keeps its full weight. A GP does the opposite (far from its data
the posterior returns to the prior), which is why MGP keeps its accuracy when a view carries no signal.

Here each target i and view m get the squared RBF distance to the nearest context point,
d²_im = min_j ‖(t_i − c_j)/λ_m‖² (= −2 log max_j G_ij, eq. 9's own distance), and a proximity

    κ_im = min(1, (d²_ref,m / d²_im)^p),

where d²_ref,m is the ``quantile`` of d² over the training set (rows stored in the memory excluded: their
distance is 0). A clean target is as close to the context as a training sample (κ = 1 for all but
about 1 − quantile of them); noise adds ‖noise/λ‖² to d² and sends κ to 0. MBA (eq. 8) then weighs view
m's terms by w_im = κ_im / max_m′ κ_im′ (relative, so the best-supported view keeps its full weight and
the posterior never degenerates):

    σ²_z = 1 / Σ_m w_m (1/s*_m + 1/q_m),   μ_z = σ²_z Σ_m w_m (r*_m/s*_m + u_m/q_m)        (eq. 8′)

which is eq. 8 with view m's observation and prior factor tempered by w_m; w = 0 is the view missing
(the missing-view limit of a destroyed view). Applied at inference; training is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from mnp.model.attention import to_positive

VIEW_WEIGHTINGS = ("none", "distance")
CHUNK = 4096  # training rows per encoding call when the reference is computed


def nearest_sq_dist(scores: Tensor, amplitude: Tensor | None = None) -> Tensor:
    """d² (M, B) of each target to its nearest context point from RBF scores (M, B, N) = σ_f exp(−d²/2)."""
    g = scores.float().max(-1).values
    if amplitude is not None:
        g = g / amplitude[:, None]
    return -2.0 * g.clamp_min(torch.finfo(g.dtype).tiny).log()


def log_proximity(d2: Tensor, ref: Tensor, power: float) -> Tensor:
    """log κ (M, B) = min(0, p (log d²_ref − log d²)), with d²_ref (M,): κ itself underflows to 0 for a large
    power far from the context (p ≥ 20 with noised views in float32), its log does not."""
    tiny = torch.finfo(d2.dtype).tiny
    return (power * (ref[:, None].clamp_min(tiny).log() - d2.clamp_min(tiny).log())).clamp(max=0.0)


def proximity(d2: Tensor, ref: Tensor, power: float) -> Tensor:
    """κ (M, B) = min(1, (d²_ref / d²)^p), with d²_ref (M,)."""
    return log_proximity(d2, ref, power).exp()


def view_weights(d2: Tensor, ref: Tensor, power: float, present: Tensor | None = None) -> Tensor:
    """MBA weights (B, M) of eq. 8′: proximity relative to the target's best-supported view (a ratio taken in log
    space, so it stays finite however small every κ is: the best view's weight is 1); ``present`` (B, M) in
    {0, 1} zeroes the views a target lacks (mnp.eval.missing) before that comparison."""
    log_kappa = log_proximity(d2, ref, power).t()
    if present is not None:
        log_kappa = log_kappa.masked_fill(present == 0, float("-inf"))
    return (log_kappa - log_kappa.max(-1, keepdim=True).values).exp()


def reference_sq_dist(d2_of, views: Sequence[Tensor], quantile: float) -> Tensor:
    """d²_ref (M,): the ``quantile`` of the training rows' nearest-context d², from ``d2_of(views) -> (M, B)``
    called on chunks of the training set; a row at distance 0 (a row the memory holds) is left out."""
    n = views[0].shape[0]
    d2 = torch.cat([d2_of([v[i : i + CHUNK] for v in views]) for i in range(0, n, CHUNK)], dim=1)
    refs = []
    for row in d2:
        away = row[row > 0]
        refs.append(torch.quantile(away, quantile) if away.numel() else row.new_tensor(float("inf")))
    return torch.stack(refs)


def check_view_weighting(weighting: str, similarity: str) -> None:
    """One-line errors for the switch (its numeric settings have domains, mnp.framework.domains)."""
    if weighting not in VIEW_WEIGHTINGS:
        raise ValueError(
            f"unknown model.aggregation.view_weighting.mode '{weighting}'; choose one of {', '.join(VIEW_WEIGHTINGS)}"
        )
    if weighting == "distance" and similarity != "rbf":
        raise ValueError(
            "model.aggregation.view_weighting.mode=distance needs model.attention.similarity=rbf (it reads "
            "the RBF kernel's distances)"
        )


class DistanceWeighting:
    """Eq. 8′ at inference on the RBF ``similarity``'s scores. Its settings (``spec.aggregation.view_weighting``: the
    power p and the quantile q) and the reference d²_ref (the model's ``distance_ref`` buffer, in checkpoints) are
    passed to each call, so a model whose ``spec`` is replaced (mnp.tools.select infer) weighs by the new settings."""

    def __init__(self, similarity: nn.Module):
        self.similarity = similarity

    def amplitude(self) -> Tensor | None:
        sim = self.similarity
        return None if sim.raw_amplitude is None else to_positive(sim.raw_amplitude, sim.param).float()

    def weights(self, scores: Tensor, ref: Tensor, power: float, present: Tensor | None = None) -> Tensor:
        """MBA weights (B, M) of eq. 8′ from the attention scores (M, B, N) and d²_ref (M,), over the ``present``
        views (B, M) only when given."""
        return view_weights(nearest_sq_dist(scores, self.amplitude()), ref, power, present)

    def reference(self, attend_scores, views: Sequence[Tensor], quantile: float) -> Tensor:
        """d²_ref (M,) over the training ``views``, from ``attend_scores(views) -> scores (M, B, N)``."""
        amp = self.amplitude()
        return reference_sq_dist(lambda vs: nearest_sq_dist(attend_scores(vs), amp), views, quantile)
