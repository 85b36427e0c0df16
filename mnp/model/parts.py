"""MNP's parts, each built from its own config node (``conf/model/mnp.yaml``): encoder, attention, aggregation (with
eq. 8′'s view weighting as its part), memory, decoder, loss, optimiser and warm-up.

A part is a frozen dataclass of plain settings that checks them (one-line errors) and builds its block.
:class:`mnp.model.MNP` takes the parts; a config node, a mapping or a part object is accepted for each. The nodes
are plain mappings, not nested ``_target_``/``_partial_`` nodes: a checkpoint stores its config and its
constructor arguments, and :mod:`mnp.runs.stored_config` refuses any Hydra special key in them, so that a crafted
checkpoint cannot name code to run. A part therefore owns its ``build`` (the optimiser part builds the optimiser
as a ``_partial_`` would).

Checkpoints and run configs written before the parts (flat keys such as ``memory_size``) are read through
:func:`mnp.runs.migrations.nest_flat`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from torch import nn

from mnp.checks import choice
from mnp.framework.domains import COUNT, NATURAL, NON_NEGATIVE, POSITIVE, UNIT, Domain, check_domains, optional
from mnp.framework.optim import EPS_PLACEMENTS, OPTIM_DOMAINS, SCHEDULES, make_optimizer
from mnp.model.aggregation import AGGREGATIONS, build_aggregation
from mnp.model.attention import NORMALISERS, POSITIVE_PARAMS, SIMILARITIES, build_similarity
from mnp.model.decoder import Decoder
from mnp.model.encoders import MERGES, NORMS, PRIORS, PROJECTIONS, ModalityEncoder
from mnp.model.memory import INITS, JSTARS, UPDATES, ContextMemory
from mnp.model.view_weighting import VIEW_WEIGHTINGS


def _check(part, name: str, **options: Sequence[str]) -> None:
    """The part's declared domains and its word-valued settings, as one-line errors naming ``model.<name>.<key>``."""
    check_domains(type(part).domains, dataclasses.asdict(part), f"model.{name}.")
    for key, allowed in options.items():
        choice(f"model.{name}.{key}", getattr(part, key), allowed)


@dataclass(frozen=True)
class EncoderPart:
    """Projection and the context encoders r, s (eq. 4) and priors u, q (eq. 6); ``norm`` is also the decoder's."""

    d_e: int = 512
    projection: str = "none"  # paper: none | official: linear | resmlp (synthetic)
    resmlp_depth: int = 6
    merge: str = "concat"  # paper: concat | official: sum
    y_embed_dim: int = 32
    norm: str = "layer"
    norm_eps: float = 1e-5
    bn_momentum: float = 0.1
    prior: str = "separate"  # paper: separate θ/ω | official: shared
    # d_e >= 2: the decoder's hidden layer has d_e // 2 units
    domains: ClassVar[dict] = dict(
        d_e=Domain(2, integer=True), resmlp_depth=NATURAL, y_embed_dim=COUNT, norm_eps=POSITIVE, bn_momentum=UNIT
    )

    def __post_init__(self):
        _check(self, "encoder", projection=PROJECTIONS, merge=MERGES, norm=NORMS, prior=PRIORS)

    def build(self, view_dims: Sequence[int], num_classes: int) -> nn.ModuleList:
        kwargs = dict(
            merge=self.merge,
            norm=self.norm,
            norm_eps=self.norm_eps,
            bn_momentum=self.bn_momentum,
            y_embed_dim=self.y_embed_dim,
        )
        return nn.ModuleList(
            ModalityEncoder(d, num_classes, self.d_e, self.projection, self.resmlp_depth, self.prior, **kwargs)
            for d in view_dims
        )


@dataclass(frozen=True)
class AttentionPart:
    """The similarity (eq. 9: RBF with lengthscale l, or eq. 1: dot) and its normaliser."""

    similarity: str = "rbf"
    lengthscale_init: float = 10.0
    lengthscale_param: str = "softplus"  # softplus | exp | identity (official: unconstrained)
    lengthscale_form: str = "l"  # paper: l2 | official: l (measured: with l = 10 the l2 form leaves attention uniform)
    amplitude: bool = False  # official: a learnable σ_f
    normaliser: str = "sparsemax"  # paper: sparsemax | ablation: softmax
    domains: ClassVar[dict] = dict(lengthscale_init=POSITIVE)

    def __post_init__(self):
        _check(
            self,
            "attention",
            similarity=SIMILARITIES,
            lengthscale_param=POSITIVE_PARAMS,
            lengthscale_form=("l", "l2"),
            normaliser=NORMALISERS,
        )

    def build(self, feature_dims: Sequence[int]) -> nn.Module:
        return build_similarity(
            self.similarity,
            feature_dims,
            lengthscale_init=self.lengthscale_init,
            param=self.lengthscale_param,
            form=self.lengthscale_form,
            amplitude=self.amplitude,
        )


@dataclass(frozen=True)
class ViewWeightingPart:
    """Eq. 8′ (docs/method.md §4.1): ``mode`` none (eq. 8) | distance, κ = min(1, (d²_ref / d²)^power), d²_ref the
    ``quantile`` of the training rows' nearest-context d²."""

    mode: str = "none"
    quantile: float = 0.99
    power: float = 1.0
    domains: ClassVar[dict] = dict(quantile=Domain(0, 1, low_open=True), power=POSITIVE)

    def __post_init__(self):
        _check(self, "aggregation.view_weighting", mode=VIEW_WEIGHTINGS)


@dataclass(frozen=True)
class AggregationPart:
    """Eq. 8 (``kind`` mba; ablations mean, concat), its view weighting, and the training-time view perturbations:
    ``modality_mask`` (official random subsets of ≥ 2 views) and ``view_dropout`` p (mnp.model.view_training)."""

    kind: str = "mba"
    view_weighting: ViewWeightingPart = field(default_factory=ViewWeightingPart)
    modality_mask: bool = False
    view_dropout: float = 0.0
    domains: ClassVar[dict] = dict(view_dropout=UNIT, view_weighting=ViewWeightingPart.domains)

    def __post_init__(self):
        object.__setattr__(
            self, "view_weighting", as_part(ViewWeightingPart, self.view_weighting, "aggregation.view_weighting")
        )
        _check(self, "aggregation", kind=AGGREGATIONS)

    def build(self, num_views: int, d_e: int) -> nn.Module:
        return build_aggregation(self.kind, num_views, d_e)


@dataclass(frozen=True)
class MemoryPart:
    """The dynamic context memory (eqs. 2–3): N^m = ``size`` rows in total, its init, update rule, j* and when the
    update is written (after_step: paper, on_train_batch_end | before_step: official)."""

    size: int = 100
    init: str = "data"  # paper: data | official: uniform
    trainable: bool = False  # official: true
    update: str = "mse"  # paper: mse (eq. 3) | ce | fifo | random
    jstar: str = "all"  # paper: all | official: same_class
    write: str = "after_step"
    domains: ClassVar[dict] = dict(size=COUNT)

    def __post_init__(self):
        _check(self, "memory", init=INITS, update=UPDATES, jstar=JSTARS, write=("after_step", "before_step"))
        if self.trainable and self.update == "random":
            raise ValueError(
                "memory.trainable cannot be combined with memory.update=random (the context is re-sampled)"
            )

    def build(self, view_dims: Sequence[int], num_classes: int) -> ContextMemory:
        return ContextMemory(view_dims, num_classes, self.size, self.init, self.trainable, self.update, self.jstar)


@dataclass(frozen=True)
class DecoderPart:
    """The logit decoder and its Monte Carlo prediction (eqs. 11–13): S = ``num_samples``; ``eval_samples``: S of
    the prediction alone (eq. 12 at evaluation; null: ``num_samples``, the paper's one S); ``sigma_as_std``
    (official bug: σ²_z used as the std); ``train`` false: never updated (official); ``scale_floor``: the least
    scale of the logit noise (eq. 11; paper's code: 0.01)."""

    num_samples: int = 5
    eval_samples: int | None = None
    sigma_as_std: bool = False
    train: bool = True
    scale_floor: float = 0.01
    domains: ClassVar[dict] = dict(
        num_samples=COUNT, eval_samples=optional(COUNT), scale_floor=Domain(0, 1, low_open=True, high_open=True)
    )

    @property
    def prediction_samples(self) -> int:
        """S of eq. 12's Monte Carlo prediction (S z-samples, S logit samples each)."""
        return self.eval_samples or self.num_samples

    def __post_init__(self):
        _check(self, "decoder")

    def build(self, d_e: int, num_classes: int, encoder: EncoderPart) -> Decoder:
        decoder = Decoder(d_e, num_classes, encoder.norm, encoder.norm_eps, encoder.bn_momentum, self.scale_floor)
        return decoder if self.train else decoder.requires_grad_(False)


@dataclass(frozen=True)
class LossPart:
    """L = L_TY (eq. 14, ``ty``: nll_of_mean paper | mean_ce official; unimodal NLLs weighted 1 + ``view_weight``)
    + β L_RBF (eq. 10: temperature τ, lengthscale penalty α·``lengthscale_penalty``, reduced by ``rbf_reduce``,
    ``self_in_denominator``: official) + ``l2``·Σ‖W‖² (Keras kernel regulariser); ``label_smoothing`` ε (ours): L_TY's
    target (1 − ε)·one-hot + ε/K."""

    ty: str = "nll_of_mean"
    view_weight: float = 0.0
    alpha: float = 1.0
    beta: float = 1.0
    tau: float = 0.25
    rbf_reduce: str = "mean"  # paper: mean | official: sum
    lengthscale_penalty: str = "norm"  # paper: α‖l‖ | official: half_sq, α‖l‖²/2
    self_in_denominator: bool = False
    l2: float = 0.0
    label_smoothing: float = 0.0
    domains: ClassVar[dict] = dict(
        view_weight=NON_NEGATIVE,
        alpha=NON_NEGATIVE,
        beta=NON_NEGATIVE,
        tau=POSITIVE,
        l2=NON_NEGATIVE,
        label_smoothing=Domain(0, 1, high_open=True),
    )

    def __post_init__(self):
        _check(
            self,
            "loss",
            ty=("nll_of_mean", "mean_ce"),
            rbf_reduce=("mean", "sum"),
            lengthscale_penalty=("norm", "half_sq"),
        )


@dataclass(frozen=True)
class OptimPart:
    """Adam and its epoch-wise schedule (:func:`mnp.framework.optim.make_optimizer`), per-tensor gradient clipping
    ``clip_norm`` and the learning-rate factor of l and σ_f, ``lengthscale_lr_scale``."""

    lr: float = 1e-3
    eps: float = 1e-8
    eps_placement: str = "torch"  # torch | official (Keras): keras
    weight_decay: float = 0.0
    schedule: str = "constant"
    milestones: tuple[int, ...] = ()
    values: tuple[float, ...] = ()
    clip_norm: float | None = None
    lengthscale_lr_scale: float = 1.0
    domains: ClassVar[dict] = {**OPTIM_DOMAINS, "clip_norm": optional(POSITIVE), "lengthscale_lr_scale": POSITIVE}

    def __post_init__(self):
        _check(self, "optim", eps_placement=EPS_PLACEMENTS, schedule=SCHEDULES)
        object.__setattr__(self, "milestones", tuple(self.milestones))  # frozen: hashable, and no caller can edit it
        object.__setattr__(self, "values", tuple(self.values))

    def build(self, param_groups: list[dict], max_epochs: int, fused: bool | None) -> dict:
        """The main optimiser and its scheduler, in Lightning's format."""
        return make_optimizer(
            param_groups,
            lr=self.lr,
            weight_decay=self.weight_decay,
            eps=self.eps,
            schedule=self.schedule,
            milestones=self.milestones,
            values=self.values,
            max_epochs=max_epochs,
            fused=fused,
            eps_placement=self.eps_placement,
        )


@dataclass(frozen=True)
class WarmupPart:
    """Contrastive-only warm-up (official): ``epochs`` of L_RBF alone with their own Adam at ``lr``, decayed
    linearly to lr·``end_factor``. The config's ``fraction`` (epochs: null) is resolved by train.py before the model
    is built, from trainer.max_epochs, which the constructor does not know: given here, it is refused with that rule."""

    epochs: int = 0
    lr: float = 1e-3
    end_factor: float = 0.1
    domains: ClassVar[dict] = dict(epochs=NATURAL, lr=POSITIVE, end_factor=UNIT)
    # read by the config (mnp.cli.validate.resolve_auto), not the part: what the constructor says of each
    config_only: ClassVar[dict] = {
        "fraction": "is read by train.py, not by the constructor: with warmup.epochs null it sets warmup.epochs = "
        "round(fraction × trainer.max_epochs); give warmup={'epochs': <that number>}"
    }

    def __post_init__(self):
        _check(self, "warmup")


PARTS = {
    "encoder": EncoderPart,
    "attention": AttentionPart,
    "aggregation": AggregationPart,
    "memory": MemoryPart,
    "decoder": DecoderPart,
    "loss": LossPart,
    "optim": OptimPart,
    "warmup": WarmupPart,
}


@dataclass(frozen=True)
class MNPSpec:
    """An MNP's parts and its implementation switches, as :class:`mnp.model.MNP` reads them (``model.spec``):
    ``weight_init`` glorot (Keras) | torch; ``fast`` (batched and fused paths, same math); ``compile``."""

    encoder: EncoderPart
    attention: AttentionPart
    aggregation: AggregationPart
    memory: MemoryPart
    decoder: DecoderPart
    loss: LossPart
    optim: OptimPart
    warmup: WarmupPart
    weight_init: str = "glorot"
    fast: bool = True
    compile: bool = False

    def replace(self, path: str, **settings) -> MNPSpec:
        """A copy with ``settings`` changed in the part at ``path`` (``"loss"``, ``"aggregation.view_weighting"``)."""
        head, _, rest = path.partition(".")
        part = getattr(self, head)
        if rest:
            inner = getattr(part, rest)
            part = dataclasses.replace(part, **{rest: dataclasses.replace(inner, **settings)})
        else:
            part = dataclasses.replace(part, **settings)
        return dataclasses.replace(self, **{head: part})


def as_part(cls: type, value: Any, name: str):
    """``value`` (None: the defaults; a mapping: a config node; or a ``cls``) as a ``cls``; an unknown key is one line
    naming ``model.<name>`` and the keys it takes."""
    if isinstance(value, cls):
        return value
    if value is None:
        return cls()
    if not isinstance(value, Mapping):
        raise ValueError(f"model.{name} must be a mapping of its settings, got {value!r}")
    known = [f.name for f in fields(cls)]
    if unknown := [k for k in value if k not in known]:
        if why := getattr(cls, "config_only", {}).get(unknown[0]):
            raise ValueError(f"model.{name}.{unknown[0]} {why}")
        raise ValueError(f"model.{name} has no setting {unknown[0]!r}; it takes {', '.join(known)}")
    return cls(**value)


def plain(part) -> dict:
    """A part as plain settings (lists, not tuples): what a checkpoint stores as constructor arguments."""

    def unfreeze(v):
        return [unfreeze(x) for x in v] if isinstance(v, (list, tuple)) else v

    return {k: unfreeze(v) for k, v in dataclasses.asdict(part).items()}
