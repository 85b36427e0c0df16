"""The conflict signals of benchmarks/research/view_conflict.py (docs/diagnosis.md, issue 31), on their principles:
a view whose posterior mean moves away from the others' is the one flagged, and with two views every signal is
symmetric, so eq. 8′'s weights are left as they were."""

from __future__ import annotations

import sys

import torch
from cfg_utils import ROOT

sys.path.insert(0, str(ROOT / "benchmarks" / "research"))
from view_conflict import conflict, pair_conflict, pred_conflict, reference, weights  # noqa: E402


def posteriors(num_views: int, shift_view: int | None, shift: float = 5.0, batch: int = 8, d: int = 4):
    """r*, s*, u, q (M, B, d): every view observes the same latent (plus a little noise), one view shifted along
    the first coordinate (the first class's logit, for the decoder below)."""
    g = torch.Generator().manual_seed(0)
    base = torch.randn(batch, d, generator=g)
    r_star = torch.stack([base + 0.01 * torch.randn(batch, d, generator=g) for _ in range(num_views)])
    if shift_view is not None:
        r_star[shift_view, :, 0] += shift
    s_star = torch.full_like(r_star, 0.5)
    return r_star, s_star, torch.zeros_like(r_star), torch.ones_like(r_star)


class Decoder(torch.nn.Module):
    """Class logits = the first K latent coordinates, scaled (a decoder whose classes follow the latent)."""

    def forward(self, z):
        return 4.0 * z[..., :3], torch.ones_like(z[..., :3])


def test_the_shifted_view_has_the_largest_conflict_under_every_signal():
    parts = posteriors(3, shift_view=1)
    for signal in (conflict(*parts), pair_conflict(*parts), pred_conflict(Decoder(), *parts)):
        assert signal.shape == (3, 8)
        assert (signal.argmax(0) == 1).all(), signal
    # against the closest other view, the two agreeing views are near 0 (the odd one out alone is flagged)
    pair = pair_conflict(*parts)
    # μ moves by 5 · σ²/s* = 10/3 in one of 4 dims: (10/3)² / 4 / (2 · 1/3) ≈ 4.17
    assert (pair[[0, 2]] < 1e-3).all() and torch.allclose(pair[1], torch.full((8,), 25 / 6), rtol=0.02)


def test_with_two_views_the_pair_signals_are_symmetric_and_leave_the_weights_equal():
    parts = posteriors(2, shift_view=0)
    for signal in (pair_conflict(*parts), pred_conflict(Decoder(), *parts)):
        torch.testing.assert_close(signal[0], signal[1])
        ref = torch.full((2,), float(signal.min()) / 2)
        log_kappa = (ref[:, None].log() - signal.log()).clamp(max=0.0)
        torch.testing.assert_close(weights([log_kappa]), torch.ones(8, 2))


def test_the_reference_is_the_quantile_of_the_nonzero_values_per_view():
    values = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 10.0, 20.0, 30.0]])
    torch.testing.assert_close(reference(values, 0.5), torch.tensor([2.5, 20.0]))
    assert weights([]) is None  # eq. 8: no weights
