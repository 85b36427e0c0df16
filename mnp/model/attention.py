"""Attention of targets over the context memory (eq. 1 dot product, eq. 9 adaptive RBF).

A similarity (``rbf`` or ``dot``) scores every target against every context point of each modality,
giving scores of shape (M, B, N); :func:`normalise` (``sparsemax`` or ``softmax``) turns them into
weights over the context axis. Squared distances come from one matmul (‖t‖² + ‖c‖² − 2 t·c), and all
modalities are scored in one batched matmul whenever their feature sizes agree. Scores are computed
in float32 even under autocast: distances lose too much precision in half precision, and entmax has
no autocast support (its sparsemax would run in whatever precision autocast hands it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from entmax import sparsemax
from torch import Tensor, nn

from mnp.checks import choice

SIMILARITIES = ("rbf", "dot")
NORMALISERS = ("sparsemax", "softmax")
POSITIVE_PARAMS = ("softplus", "exp", "identity")  # identity: the official code's raw, unconstrained l and σ_f
POSITIVE_FLOOR = 1e-6  # keeps l and σ_f > 0 in float32, where softplus/exp of a very negative value underflow to 0


def to_positive(raw: Tensor, param: str) -> Tensor:
    """Map an unconstrained parameter to a positive value (softplus or exp, plus a tiny floor);
    ``identity`` uses it as it is, unconstrained (official code)."""
    if param == "identity":
        return raw
    return POSITIVE_FLOOR + (F.softplus(raw) if param == "softplus" else raw.exp())


def from_positive(value: float, param: str) -> float:
    """Inverse of :func:`to_positive`, for initialisation."""
    if param == "identity":
        return value
    value -= POSITIVE_FLOOR
    return math.log(math.expm1(value)) if param == "softplus" else math.log(value)


def sq_dist(a: Tensor, b: Tensor) -> Tensor:
    """Squared Euclidean distances (..., B, d) × (..., N, d) -> (..., B, N) via one matmul, clamped ≥ 0."""
    d2 = a.pow(2).sum(-1, keepdim=True) + b.pow(2).sum(-1).unsqueeze(-2) - 2 * a @ b.transpose(-1, -2)
    return d2.clamp_min(0)


def _float32(xs: Sequence[Tensor] | Tensor) -> list[Tensor] | Tensor:
    return xs.float() if isinstance(xs, Tensor) else [x.float() for x in xs]


def _batched(fn, a: Sequence[Tensor] | Tensor, b: Sequence[Tensor] | Tensor) -> Tensor:
    """Apply a pairwise function to every modality: one batched call when the shapes agree (always for
    inputs already stacked as (M, rows, d) tensors)."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return fn(a, b)
    if len({x.shape[-1] for x in a}) == 1 and len({x.shape for x in b}) == 1 and len({x.shape for x in a}) == 1:
        return fn(torch.stack(list(a)), torch.stack(list(b)))
    return torch.stack([fn(x, y) for x, y in zip(a, b)])


class RBFSimilarity(nn.Module):
    """Adaptive RBF scores G_ij = σ_f · exp(−½ ‖(t_i − c_j) / λ‖²), one lengthscale vector per modality (eq. 9).

    ``form``: ``"l2"`` divides by λ = l² (the paper's κ); ``"l"`` divides by λ = l (official code).
    ``amplitude``: learn σ_f (initialised to 1, official code); otherwise σ_f = 1 (paper).
    l and σ_f are kept positive through ``param`` (softplus or exp of an unconstrained tensor).
    """

    def __init__(
        self,
        dims: Sequence[int],
        lengthscale_init: float = 10.0,
        param: str = "softplus",
        form: str = "l2",
        amplitude: bool = False,
    ):
        super().__init__()
        self.param = choice("lengthscale_param", param, POSITIVE_PARAMS)
        self.form = choice("lengthscale_form", form, ("l", "l2"))
        if lengthscale_init <= 0:
            raise ValueError(f"lengthscale_init must be positive, got {lengthscale_init}")
        raw = from_positive(float(lengthscale_init), param)
        self.raw_lengthscale = nn.ParameterList([nn.Parameter(torch.full((int(d),), raw)) for d in dims])
        self.raw_amplitude = nn.Parameter(torch.full((len(dims),), from_positive(1.0, param))) if amplitude else None
        self.stack = False  # True (MNP's fast path): equal-size lengthscales as one (M, d) tensor, mnp.model.stacked
        self._stacks = None
        self._held: Tensor | None = None  # see hold()

    def stacked_lengthscales(self) -> Tensor | None:
        """All lengthscales as one (M, d) tensor when ``stack`` is on and they have one size, else None."""
        from mnp.model.stacked import Stacks, distributed, stackable

        if self._held is not None:
            return self._held
        if not self.stack or distributed() or not stackable(list(self.raw_lengthscale)):
            return None
        if self._stacks is None:
            self._stacks = Stacks({"raw": [(self.raw_lengthscale, str(i)) for i in range(len(self.raw_lengthscale))]})
        return to_positive(self._stacks["raw"], self.param)

    def hold(self) -> None:
        """Compute the stacked lengthscales once for the calls until :meth:`release` (one training loss: the
        attention, the contrastive loss and the penalty read the same l)."""
        self._held = None
        self._held = self.stacked_lengthscales()

    def release(self) -> None:
        self._held = None

    def lengthscales(self) -> list[Tensor]:
        stacked = self.stacked_lengthscales()
        if stacked is not None:
            return list(stacked.unbind(0))
        return [to_positive(r, self.param) for r in self.raw_lengthscale]

    def forward(self, targets: Sequence[Tensor] | Tensor, contexts: Sequence[Tensor] | Tensor) -> Tensor:
        """Scores (M, B, N) of targets (B, d_m) against contexts (N, d_m), per modality m (lists, or tensors
        (M, B, d) and (M, N, d) when the modalities share d)."""
        with torch.autocast(targets[0].device.type, enabled=False):
            power = 2 if self.form == "l2" else 1
            stacked = self.stacked_lengthscales()
            if stacked is not None and all(
                isinstance(x, Tensor) or len({t.shape for t in x}) == 1 for x in (targets, contexts)
            ):
                scale = stacked.pow(power).unsqueeze(1)  # (M, 1, d): every modality divided at once
                t = (targets if isinstance(targets, Tensor) else torch.stack(targets)).float() / scale
                c = (
                    t
                    if contexts is targets
                    else (contexts if isinstance(contexts, Tensor) else torch.stack(contexts)).float() / scale
                )
                g = torch.exp(-0.5 * sq_dist(t, c))
            else:
                scale = [l.pow(power) for l in self.lengthscales()]
                t = [x / s for x, s in zip(_float32(targets), scale)]
                c = [x / s for x, s in zip(_float32(contexts), scale)]
                g = torch.exp(-0.5 * _batched(sq_dist, t, c))
            if self.raw_amplitude is not None:
                g = g * to_positive(self.raw_amplitude, self.param)[:, None, None]
            return g

    def penalty(self, kind: str) -> Tensor:
        """Per-modality lengthscale penalty (M,): ``norm`` ‖l‖ (paper) or ``half_sq`` ‖l‖²/2 (official)."""
        stacked = self.stacked_lengthscales()
        if stacked is not None:
            return stacked.norm(dim=-1) if kind == "norm" else 0.5 * stacked.pow(2).sum(-1)
        ls = self.lengthscales()
        if kind == "norm":
            return torch.stack([l.norm() for l in ls])
        return torch.stack([0.5 * l.pow(2).sum() for l in ls])

    def __getstate__(self):
        return {**super().__getstate__(), "_stacks": None, "_held": None}


class DotSimilarity(nn.Module):
    """Scaled dot-product scores t·c / √d (eq. 1); it has no lengthscale, so its penalty is zero."""

    def __init__(self, dims: Sequence[int]):
        super().__init__()
        self.register_buffer("zero", torch.zeros(len(dims)), persistent=False)

    def forward(self, targets: Sequence[Tensor], contexts: Sequence[Tensor]) -> Tensor:
        with torch.autocast(targets[0].device.type, enabled=False):
            return _batched(
                lambda a, b: a @ b.transpose(-1, -2) / math.sqrt(a.shape[-1]), _float32(targets), _float32(contexts)
            )

    def penalty(self, kind: str) -> Tensor:
        return self.zero


def build_similarity(name: str, dims: Sequence[int], **rbf_kwargs) -> nn.Module:
    """``rbf`` (eq. 9) or ``dot`` (eq. 1) similarity over modalities with feature sizes ``dims``."""
    if choice("similarity", name, SIMILARITIES) == "rbf":
        return RBFSimilarity(dims, **rbf_kwargs)
    return DotSimilarity(dims)


class Sparsemax(torch.autograd.Function):
    """entmax's sparsemax over the last axis with a full sort, bit for bit, without host syncs: its
    backward zeroes the gradient outside the support with ``torch.where`` where entmax assigns through a
    boolean mask (a ``nonzero`` and a host sync on a GPU); static methods, so dynamo traces it."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        x = x - x.max(dim=-1, keepdim=True).values
        srt = torch.sort(x, dim=-1, descending=True).values
        cumsum = srt.cumsum(-1) - 1
        rho = torch.arange(1, x.shape[-1] + 1, device=x.device, dtype=x.dtype)
        support = (rho * srt > cumsum).sum(-1, keepdim=True)
        tau = cumsum.gather(-1, support - 1)
        tau /= support.to(x.dtype)
        out = torch.clamp(x - tau, min=0)
        ctx.save_for_backward(support, out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        support, out = ctx.saved_tensors
        inside = out != 0
        grad = torch.where(inside, grad, 0.0)
        v_hat = grad.sum(-1, keepdim=True) / support.to(out.dtype)
        return torch.where(inside, grad - v_hat, grad)


def normalise(scores: Tensor, kind: str, k: int | None = None) -> Tensor:
    """Attention weights over the last (context) axis: sparsemax (eq. 9) or softmax, in float32.

    ``k``: sparsemax partially sorts the k largest scores instead of sorting all N (entmax's exact
    top-k path: rows whose support reaches k are redone with 2k; the result is the same, but finding
    those rows reads the device). Without ``k``: :class:`Sparsemax` (a full sort, no host sync).
    """
    with torch.autocast(scores.device.type, enabled=False):
        scores = scores.float()
        if kind != "sparsemax":
            return scores.softmax(-1)
        return Sparsemax.apply(scores) if k is None or k >= scores.shape[-1] else sparsemax(scores, dim=-1, k=k)


def topk_hint(attn: Tensor) -> int | None:
    """Partial-sort size for the next sparsemax over similar scores: the largest support in ``attn``
    doubled and rounded up to a power of two, or None (full sort) unless that is below N/4."""
    support = int((attn > 0).sum(-1).max())
    k = 1 << max(2 * support - 1, 1).bit_length()
    return k if 4 * k <= attn.shape[-1] else None
