"""Input projection and the context encoders: r/s (eq. 4) and the priors u/q (eq. 6)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mnp.attention import choice

LEAKY_SLOPE = 0.3  # Keras' LeakyReLU default, used throughout the official code
PROJECTIONS = ("none", "linear", "resmlp")
MERGES = ("concat", "sum")
NORMS = ("layer", "batch")
PRIORS = ("separate", "shared")


def positive_scale(h: Tensor) -> Tensor:
    """0.01 + 0.99·softplus(h): the positive variance of s, q and the logit scale."""
    return 0.01 + 0.99 * F.softplus(h)


class Norm(nn.Module):
    """LayerNorm or BatchNorm over the last axis of a tensor of any rank.

    ``momentum`` uses PyTorch's convention (Keras' 0.99 is PyTorch's 0.01).
    """

    def __init__(self, kind: str, dim: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.kind = choice("norm", kind, NORMS)
        self.norm = nn.LayerNorm(dim, eps=eps) if kind == "layer" else nn.BatchNorm1d(dim, eps=eps, momentum=momentum)

    def forward(self, x: Tensor) -> Tensor:
        if self.kind == "layer":
            return self.norm(x)
        return self.norm(x.reshape(-1, x.shape[-1])).reshape(x.shape)


class ResMLP(nn.Module):
    """A linear lift d_in -> d followed by ``depth`` residual FC layers with ReLU (the paper's
    synthetic feature extractor: 2-D two moons lifted to 128-d by 6 residual FC layers)."""

    def __init__(self, d_in: int, d: int, depth: int = 6):
        super().__init__()
        self.lift = nn.Linear(d_in, d)
        self.layers = nn.ModuleList(nn.Linear(d, d) for _ in range(depth))

    def forward(self, x: Tensor) -> Tensor:
        h = self.lift(x)
        for layer in self.layers:
            h = h + F.relu(layer(h))
        return h


def make_projection(kind: str, d_in: int, d_e: int, depth: int = 6) -> tuple[nn.Module, int]:
    """Input projection and its output size.

    ``none``: attend on raw features (paper); ``linear``: Linear d^m -> d_e + LeakyReLU(0.3)
    (official); ``resmlp``: :class:`ResMLP` (paper, synthetic data).
    """
    choice("projection", kind, PROJECTIONS)
    if kind == "none":
        return nn.Identity(), d_in
    if kind == "linear":
        return nn.Sequential(nn.Linear(d_in, d_e), nn.LeakyReLU(LEAKY_SLOPE)), d_e
    return ResMLP(d_in, d_e, depth), d_e


class Encoder(nn.Module):
    """enc([x; y]): FC -> LeakyReLU -> FC -> norm (eqs. 4 and 6), positive when it encodes a variance.

    ``merge``: ``concat`` feeds [x; onehot y] (paper); ``sum`` feeds ReLU(x + emb(y)) with
    emb = FC(K -> y_embed_dim, LeakyReLU) -> FC(-> d_x) (official).
    """

    def __init__(self, d_x: int, num_classes: int, d_e: int, merge: str = "concat", norm: str = "layer",
                 norm_eps: float = 1e-5, bn_momentum: float = 0.1, y_embed_dim: int = 32, positive: bool = False):
        super().__init__()
        self.merge = choice("merge", merge, MERGES)
        self.positive = positive
        if merge == "sum":
            self.y_embed = nn.Sequential(nn.Linear(num_classes, y_embed_dim), nn.LeakyReLU(LEAKY_SLOPE),
                                         nn.Linear(y_embed_dim, d_x))
            d_in = d_x
        else:
            self.y_embed = None
            d_in = d_x + num_classes
        self.fc1 = nn.Linear(d_in, d_e)
        self.fc2 = nn.Linear(d_e, d_e)
        self.norm = Norm(norm, d_e, norm_eps, bn_momentum)

    def forward(self, x: Tensor, y_onehot: Tensor) -> Tensor:
        h = F.relu(x + self.y_embed(y_onehot)) if self.y_embed is not None else torch.cat([x, y_onehot], -1)
        h = self.norm(self.fc2(F.leaky_relu(self.fc1(h), LEAKY_SLOPE)))
        return positive_scale(h) if self.positive else h


class ModalityEncoder(nn.Module):
    """Everything one modality owns before attention: projection, r/s encoders and the u/q priors.

    ``prior``: ``separate`` encoders θ/ω for u/q (paper, eq. 6) or ``shared`` reuse of φ/ψ (official).
    """

    def __init__(self, d_in: int, num_classes: int, d_e: int, projection: str = "none", resmlp_depth: int = 6,
                 prior: str = "separate", **encoder_kwargs):
        super().__init__()
        self.projection, self.d_x = make_projection(projection, d_in, d_e, resmlp_depth)
        self.prior = choice("prior", prior, PRIORS)
        self.enc_r = Encoder(self.d_x, num_classes, d_e, **encoder_kwargs)
        self.enc_s = Encoder(self.d_x, num_classes, d_e, positive=True, **encoder_kwargs)
        if prior == "separate":
            self.enc_u = Encoder(self.d_x, num_classes, d_e, **encoder_kwargs)
            self.enc_q = Encoder(self.d_x, num_classes, d_e, positive=True, **encoder_kwargs)

    def project(self, x: Tensor) -> Tensor:
        return self.projection(x)

    def represent(self, c: Tensor, y_onehot: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """r, s (N, d_e) over the projected context c (eq. 4) and u, q (d_e,) means over it (eq. 6)."""
        r, s = self.enc_r(c, y_onehot), self.enc_s(c, y_onehot)
        if self.prior == "shared":
            return r, s, r.mean(0), s.mean(0)
        return r, s, self.enc_u(c, y_onehot).mean(0), self.enc_q(c, y_onehot).mean(0)
