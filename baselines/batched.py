"""Vectorised stacks of independent layers: E members (ensemble members or per-view heads) run as
one batched matmul, each member with its own initialisation and its own fan-in."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn


class BatchedLinear(nn.Module):
    """E independent ``nn.Linear`` layers: (E, B, d_in) -> (E, B, d_out).

    Member e is initialised exactly like ``nn.Linear(fan_in[e], d_out)`` (uniform ±1/√fan_in).
    When a member's real input is narrower than d_in (zero-padded views), its fan-in is the real
    width; the padded rows only ever meet zeros, so they never change the output.
    """

    def __init__(self, members: int, d_in: int, d_out: int, fan_in: Sequence[int] | None = None):
        super().__init__()
        fan_in = list(fan_in) if fan_in is not None else [d_in] * members
        if len(fan_in) != members:
            raise ValueError(f"fan_in has {len(fan_in)} entries for {members} members")
        self.weight = nn.Parameter(torch.empty(members, d_in, d_out))
        self.bias = nn.Parameter(torch.empty(members, 1, d_out))
        with torch.no_grad():
            for e, f in enumerate(fan_in):
                bound = 1.0 / math.sqrt(f)
                self.weight[e].uniform_(-bound, bound)
                self.bias[e].uniform_(-bound, bound)
                self.weight[e, f:].zero_()

    def forward(self, x: Tensor) -> Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class BatchedMLP(nn.Module):
    """E independent MLPs (FC → ReLU (→ Dropout) blocks, then a linear output), as ``baselines.mlp.mlp``."""

    def __init__(
        self,
        members: int,
        d_in: int,
        hidden: Sequence[int],
        d_out: int,
        dropout: float = 0.0,
        fan_in: Sequence[int] | None = None,
    ):
        super().__init__()
        layers: list[nn.Module] = []
        for h in hidden:
            layers += [BatchedLinear(members, d_in, h, fan_in), nn.ReLU()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            d_in, fan_in = h, None
        layers.append(BatchedLinear(members, d_in, d_out, fan_in))
        self.net = nn.Sequential(*layers)
        self.members = members

    def forward(self, x: Tensor) -> Tensor:
        """x: (E, B, d_in), or (B, d_in) shared by every member -> (E, B, d_out)."""
        if x.dim() == 2:
            x = x.expand(self.members, *x.shape)
        return self.net(x)


def pad_views(views: Sequence[Tensor]) -> Tensor:
    """Stack views of different widths into (M, B, d_max), zero-padding the narrower ones."""
    d_max = max(v.shape[-1] for v in views)
    return torch.stack([nn.functional.pad(v, (0, d_max - v.shape[-1])) for v in views])
