"""Input projection and the context encoders: r/s (eq. 4) and the priors u/q (eq. 6)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mnp.checks import choice
from mnp.model.stacked import Stacks, distributed, stackable

LEAKY_SLOPE = 0.3  # Keras' LeakyReLU default, used throughout the official code
PROJECTIONS = ("none", "linear", "resmlp")
MERGES = ("concat", "sum")
NORMS = ("layer", "batch")
PRIORS = ("separate", "shared")


def positive_scale(h: Tensor, floor: float = 0.01) -> Tensor:
    """floor + (1 - floor)·softplus(h), 0.01 + 0.99·softplus(h) in the paper's code: the positive variance of s, q
    and the logit scale (whose floor is a switch, ``decoder.scale_floor``)."""
    return floor + (1.0 - floor) * F.softplus(h)


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

    def __init__(
        self,
        d_x: int,
        num_classes: int,
        d_e: int,
        merge: str = "concat",
        norm: str = "layer",
        norm_eps: float = 1e-5,
        bn_momentum: float = 0.1,
        y_embed_dim: int = 32,
        positive: bool = False,
    ):
        super().__init__()
        self.merge = choice("merge", merge, MERGES)
        self.positive = positive
        if merge == "sum":
            self.y_embed = nn.Sequential(
                nn.Linear(num_classes, y_embed_dim), nn.LeakyReLU(LEAKY_SLOPE), nn.Linear(y_embed_dim, d_x)
            )
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

    def __init__(
        self,
        d_in: int,
        num_classes: int,
        d_e: int,
        projection: str = "none",
        resmlp_depth: int = 6,
        prior: str = "separate",
        **encoder_kwargs,
    ):
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


def stacked_roles(encoders: Sequence[ModalityEncoder]) -> list[list[Encoder]] | None:
    """Every modality's context encoders, the plain ones first (r, u) and then the positive ones (s, q),
    when all of them can run as one batched computation (:func:`encode_stacked`): input sizes equal,
    ``merge=concat``, one norm (a batch norm with running statistics and a momentum); otherwise None."""
    roles = [[e.enc_r, e.enc_u, e.enc_s, e.enc_q] if e.prior == "separate" else [e.enc_r, e.enc_s] for e in encoders]
    flat = [enc for r in roles for enc in r]
    if (
        len({e.d_x for e in encoders}) != 1
        or len({e.norm.kind for e in flat}) != 1
        or any(e.merge != "concat" for e in flat)
    ):
        return None
    if flat[0].norm.kind == "batch" and any(
        e.norm.norm.momentum is None or not e.norm.norm.track_running_stats for e in flat
    ):
        return None
    return roles


def stacked_groups(roles: list[list[Encoder]]) -> dict[str, list[tuple[nn.Module, str]]]:
    """Where :func:`stacked_roles`' encoders keep their parameters, by kind, modality-major: (module,
    attribute) slots, what mnp.model.stacked.Stacks stacks."""
    flat = [enc for r in roles for enc in r]
    groups = {
        f"{layer}.{kind}": [(getattr(e, layer), kind) for e in flat]
        for layer in ("fc1", "fc2")
        for kind in ("weight", "bias")
    }
    kinds = ("weight", "bias") + (
        ("running_mean", "running_var", "num_batches_tracked")  # updated in place
        if flat[0].norm.kind == "batch"
        else ()
    )
    groups.update({f"norm.{kind}": [(e.norm.norm, kind) for e in flat] for kind in kinds})
    return groups


class EncoderStacks:
    """The fast path's batched parameters of every modality (mnp.model.stacked), built at first use: the linear
    projections' biases (``projection``) and the context encoders (``context``: one input size, merge=concat, one
    norm). :meth:`get` is None when there are none, when the parameters differ in dtype, device or
    requires_grad, or under torch.distributed."""

    def __init__(self, encoders: Sequence[ModalityEncoder], projection: bool, context: bool):
        self.encoders, self.projection, self.context = encoders, projection, context
        self.built: Stacks | None = None

    def get(self) -> Stacks | None:
        if not (self.projection or self.context) or distributed():
            return None
        if self.built is None:
            stacks = Stacks(self.groups())
            if not all(stackable(stacks.tensors(name)) for name in stacks.slots):
                return None
            self.built = stacks
        return self.built

    def groups(self) -> dict[str, list[tuple[nn.Module, str]]]:
        groups = stacked_groups(stacked_roles(self.encoders)) if self.context else {}
        if self.projection:
            groups["projection.bias"] = [(enc.projection[0], "bias") for enc in self.encoders]
        return groups

    def __getstate__(self):
        return {**self.__dict__, "built": None}


def encode_stacked(
    stacks,
    c: Tensor,
    y_onehot: Tensor,
    num_roles: int,
    eps: float,
    norm: str = "layer",
    training: bool = True,
    momentum: float = 0.1,
):
    """Eqs. 4 and 6 for all M modalities and their R encoders at once: the first layers of a modality's
    encoders as one matmul over their shared input [c; y], the second layers and the norms as one
    batched matmul and one norm over all M·R encoders.

    ``stacks``: the (M·R, ...) leaves of :func:`stacked_groups`; c: projected contexts (M, N, d_x);
    y_onehot (N, K). Returns r, s (M, N, d_e) and u, q (M, 1, d_e) as :meth:`ModalityEncoder.represent`
    gives them per modality (``num_roles`` 2: the shared prior, u and q the means of r and s). ``norm``
    ``batch``: one batch norm over the M·R·d_e features (each encoder's own statistics, updated in place
    in training as BatchNorm1d does).
    """
    m, n, _ = c.shape
    w1 = stacks["fc1.weight"]
    g, d_e = w1.shape[:2]
    # Transposed activations (features, rows), W·xᵀ: the weights' gradients come out in their own layout
    x = torch.cat([c, y_onehot.expand(m, n, -1)], -1)  # (M, N, d_x + K), shared by R encoders
    h = torch.baddbmm(
        stacks["fc1.bias"].view(m, num_roles * d_e, 1), w1.view(m, num_roles * d_e, -1), x.transpose(1, 2)
    )  # (M, R·d_e, N)
    h = F.leaky_relu(h, LEAKY_SLOPE).view(g, d_e, n)
    h = torch.baddbmm(stacks["fc2.bias"].unsqueeze(-1), stacks["fc2.weight"], h)  # (M·R, d_e, N)
    if norm == "layer":
        h = torch.addcmul(
            stacks["norm.bias"].unsqueeze(1),
            F.layer_norm(h.transpose(1, 2), (d_e,), eps=eps),
            stacks["norm.weight"].unsqueeze(1),
        )
    else:  # every encoder's features as the channels of one (1, M·R·d_e, N) batch: statistics over the N rows
        h = (
            F.batch_norm(
                h.view(1, g * d_e, n),
                stacks["norm.running_mean"].view(-1),
                stacks["norm.running_var"].view(-1),
                stacks["norm.weight"].view(-1),
                stacks["norm.bias"].view(-1),
                training,
                momentum,
                eps,
            )
            .view(g, d_e, n)
            .transpose(1, 2)
        )
        if training:
            stacks["norm.num_batches_tracked"].add_(1)
    h = h.view(m, num_roles, n, d_e)
    half = num_roles // 2
    plain, positive = h[:, :half], positive_scale(h[:, half:])  # (r, u) and (s, q)
    r, s = plain[:, 0], positive[:, 0]
    if num_roles == 2:
        return r, s, r.mean(1, keepdim=True), s.mean(1, keepdim=True)
    return r, s, plain[:, 1].mean(1, keepdim=True), positive[:, 1].mean(1, keepdim=True)


def project_stacked(weights: Sequence[Tensor], bias: Tensor, xs: Sequence[Tensor]) -> Tensor:
    """Every modality's linear projection (Linear d^m -> d_e, LeakyReLU) as one batched matmul: inputs
    xs[m] (rows, d^m) and weights[m] (d_e, d^m) zero-padded to the widest modality (the padding adds exact
    zeros), ``bias`` (M, d_e). Returns (M, rows, d_e)."""
    width = max(x.shape[-1] for x in xs)

    def pad(t: Tensor) -> Tensor:
        return t if t.shape[-1] == width else F.pad(t, (0, width - t.shape[-1]))

    x, w = torch.stack([pad(x) for x in xs]), torch.stack([pad(w) for w in weights])
    return F.leaky_relu(torch.baddbmm(bias.unsqueeze(1), x, w.transpose(1, 2)), LEAKY_SLOPE)


def glorot_(module: nn.Module) -> None:
    """Keras' Dense initialisation: Glorot-uniform kernels, zero biases."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
