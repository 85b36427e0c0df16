"""MNP's per-view predictions (docs/method.md §5.5): the decoder applied to each view's unimodal posterior.

MBA (eq. 8) with a single view's terms is that view's own posterior of z,

    σ²_m = 1 / (1/s*_m + 1/q_m),   μ_m = σ²_m (r*_m/s*_m + u_m/q_m),

the same posteriors the training loss decodes for its unimodal terms (eq. 14). Decoded by Monte Carlo as the
multimodal one is (eqs. 11–13), they give view m's own prediction. The view weighting of eq. 8′ changes only
the fused posterior, never a unimodal one.
"""

from __future__ import annotations

from torch import Tensor

from mnp.model.decoder import sample_logits


def view_softmaxes(aggregation, decoder, decoder_part, r_star, s_star, u, q, generator=None) -> list[Tensor]:
    """M per-sample softmaxes (S·S, B, K), view m's from its unimodal posterior alone (the test loop's
    ``view_predictions`` hook, mnp.eval.per_view); ``decoder_part``: the decoder's settings (``prediction_samples``,
    ``sigma_as_std``)."""
    mu_m, var_m = aggregation.unimodal(r_star, s_star, u, q)  # (M, B, d)
    s = decoder_part.prediction_samples
    logits = sample_logits(decoder, mu_m, var_m, s, decoder_part.sigma_as_std, generator)
    return list(logits.float().softmax(-1).unbind(1))  # (S·S, M, B, K) -> M × (S·S, B, K)
