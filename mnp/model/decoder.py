"""The logit decoder and Monte Carlo prediction (eqs. 11–13)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mnp.model.encoders import LEAKY_SLOPE, Norm, positive_scale


class Decoder(nn.Module):
    """FC(d_e -> d_e/2, LeakyReLU) -> norm -> FC(2K): the logit mean and scale f + (1 - f)·softplus, f =
    ``scale_floor`` (0.01 in the paper's code: the least logit noise a prediction keeps, eq. 11)."""

    def __init__(
        self,
        d_e: int,
        num_classes: int,
        norm: str = "layer",
        norm_eps: float = 1e-5,
        bn_momentum: float = 0.1,
        scale_floor: float = 0.01,
    ):
        super().__init__()
        self.scale_floor = scale_floor
        self.fc1 = nn.Linear(d_e, d_e // 2)
        self.norm = Norm(norm, d_e // 2, norm_eps, bn_momentum)
        self.fc2 = nn.Linear(d_e // 2, 2 * num_classes)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        loc, raw_scale = self.fc2(self.norm(F.leaky_relu(self.fc1(z), LEAKY_SLOPE))).chunk(2, dim=-1)
        return loc, positive_scale(raw_scale, self.scale_floor)


def sample_logits(
    decoder: Decoder,
    mu: Tensor,
    var: Tensor | None,
    num_samples: int,
    sigma_as_std: bool = False,
    generator: torch.Generator | None = None,
) -> Tensor:
    """S z-samples from N(mu, var), then S logit samples per z: logits (S·S, *mu.shape[:-1], K).

    Eqs. 11–13 by Monte Carlo, all posteriors and samples in one decoder call. ``sigma_as_std``
    reproduces the official code, which uses the variance as the standard deviation. With a
    deterministic z (``var=None``) the decoder runs once and S·S logit samples are drawn. The draws come
    from ``generator`` (the global RNG when ``None``).
    """
    s = num_samples
    if var is None:
        loc, scale = decoder(mu.unsqueeze(0))
        eps = torch.randn((s * s, *loc.shape[1:]), device=loc.device, dtype=loc.dtype, generator=generator)
        return torch.addcmul(loc, scale, eps)
    std = var if sigma_as_std else var.sqrt()
    z = torch.addcmul(mu, std, torch.randn((s, *mu.shape), device=mu.device, dtype=mu.dtype, generator=generator))
    loc, scale = decoder(z)  # (S, ..., K)
    eps = torch.randn((s, *loc.shape), device=loc.device, dtype=loc.dtype, generator=generator)
    return torch.addcmul(loc, scale, eps).reshape(s * s, *loc.shape[1:])
