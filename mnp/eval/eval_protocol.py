"""The evaluation protocol (docs/method.md §5) as one object: :class:`EvalProtocol`, the ``eval:`` node of
``conf/train.yaml`` (``+eval.*`` of ``evaluate.py``) plus the run's seed.

The pipeline builds it once per model from the run config (:meth:`EvalProtocol.from_config`) and hands it whole
to :meth:`mnp.framework.routine.Routine.configure_evaluation`; the test loop and its helpers (``protocols``,
``missing``, ``per_view``, ``posthoc``) read its fields as ``model.protocol.<key>``, each named as in the
config. The protocol is no constructor argument of a model, so no checkpoint holds it: a checkpoint holds the
run config (``eval`` included), and ``evaluate.py`` builds the protocol from it again, a key an older run did
not write taking its default here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from omegaconf import OmegaConf

from mnp.checks import check_int, is_finite
from mnp.eval.calibration import check_calibration
from mnp.eval.conformal import RAPS_K_REG, RAPS_LAMBDA, check_conformal
from mnp.eval.missing import missing_flag, removal_sets
from mnp.eval.per_view import per_view_flag
from mnp.eval.protocols import (
    DEFAULT_MAX_SUBSETS,
    check_split,
    default_noise_levels,
    noise_subsets,
    resolve_noise_batch_rows,
)

SEED_MAX = 2**32 - 1  # what numpy (and so seed_everything) accepts
MAX_NOISE_SUBSETS = 1024  # eval.noise_max_subsets: 16 times the default 64; each subset costs a predict per level


@dataclass(frozen=True)
class EvalProtocol:
    """Every setting the test loop reads; the defaults are those of ``conf/train.yaml``. Each value is checked
    when the object is built, with a one-line ValueError naming its ``eval.<key>``.

    ``noise_batch_rows``: 0 predicts each (σ, subset) noised copy of a test batch in its own call; N > 0 all of
    them together, in calls of at most N rows; ``auto`` is 0 on the CPU, 65536 on a GPU. The noised inputs are
    the same either way, so a model deterministic at test time gives the same noisy metrics; a sampling one
    (MNP, MC dropout, ...) draws its samples in another layout: statistically equivalent, not identical, ones.
    ``missing``: each view removed in turn and each noise subset removed; skipped for a single view.
    ``split=val``: the whole evaluation runs on the validation rows and every metric is named ``val/...``
    (:func:`~mnp.eval.protocols.validation_names`), so no test metric exists."""

    noise: bool = True  # the noise protocol (noise/acc@<σ>, ...)
    noise_levels: tuple[float, ...] | None = None  # the σ of the noise; None: logspace(-2, 1, 10)
    noise_subset_size: int | None = None  # views per noised subset; None: floor(M / 2)
    noise_max_subsets: int = DEFAULT_MAX_SUBSETS  # at most this many subsets noised, drawn from noise_seed
    noise_seed: int = 0  # seeds the noise (protocols.noise_generator) and that draw of subsets
    n_bins: int = 15  # ECE bins
    noise_batch_rows: int | str = "auto"  # rows per predict call of the noise protocol (see below)
    missing: bool = True  # the missing-view protocol (mnp.eval.missing)
    split: str = "test"  # test | val: the rows evaluated (val: the selection protocol, metrics named val/...)
    per_view: bool = True  # each view's own prediction's metrics, view/... (mnp.eval.per_view)
    calibration: str = "none"  # none | temperature | vector | dirichlet | isotonic (mnp.eval.calibration)
    conformal: str = "none"  # none | thr | aps | raps: split conformal sets (mnp.eval.conformal)
    conformal_alpha: float = 0.1  # the sets' miscoverage: they hold the true class with probability >= 1 - alpha
    raps_lambda: float = RAPS_LAMBDA  # RAPS's penalty per class beyond rank raps_k_reg
    raps_k_reg: int = RAPS_K_REG
    sample_seed: int = 0  # the run's seed: seeds the test predictions' own sampling (protocols.sample_generator)

    def __post_init__(self):
        if not isinstance(self.noise, bool):
            raise ValueError(f"eval.noise must be true or false, got {self.noise!r}")
        levels = self.noise_levels
        if levels is None:
            levels = default_noise_levels()
        elif not isinstance(levels, (list, tuple)) or not levels or not all(is_finite(s) and s >= 0 for s in levels):
            raise ValueError(
                f"eval.noise_levels must be null or a non-empty list of finite numbers >= 0, got {levels!r}"
            )
        object.__setattr__(self, "noise_levels", tuple(levels))  # as given: the σ keys and arrays of a run unchanged
        check_int("eval.n_bins", self.n_bins, 1)
        if self.noise_subset_size is not None:
            check_int("eval.noise_subset_size", self.noise_subset_size, 1)
        # bounded: drawing 10^8 subsets took 11 min and 5 GB before training
        check_int("eval.noise_max_subsets", self.noise_max_subsets, 1, MAX_NOISE_SUBSETS)
        check_int("eval.noise_seed", self.noise_seed, 0, SEED_MAX)
        resolve_noise_batch_rows(self.noise_batch_rows, "cpu")
        missing_flag(self.missing)
        check_split(self.split)
        per_view_flag(self.per_view)
        check_calibration(self.calibration)
        check_conformal(self.conformal, self.conformal_alpha, self.raps_lambda, self.raps_k_reg)
        check_int("seed", self.sample_seed, 0, SEED_MAX)

    @classmethod
    def keys(cls) -> list[str]:
        """The ``eval.*`` keys: every field but the run's seed."""
        return [f.name for f in fields(cls) if f.name != "sample_seed"]

    @classmethod
    def from_config(cls, node, seed: int = 0) -> EvalProtocol:
        """The protocol of an ``eval`` node (a DictConfig, a mapping or None: every default) and the run's ``seed``;
        a one-line ValueError for a node that is no mapping, an unknown key or a bad value."""
        ev = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        ev = {} if ev is None else ev
        if not isinstance(ev, Mapping):
            raise ValueError(f"eval must be a mapping of evaluation keys ({', '.join(cls.keys())}), got {ev!r}")
        if unknown := sorted(set(ev) - set(cls.keys())):
            raise ValueError(f"eval.{unknown[0]} is not an evaluation key; valid keys: {', '.join(cls.keys())}")
        return cls(**ev, sample_seed=seed)

    def subsets(self, num_views: int) -> list[tuple[int, ...]]:
        """The view subsets the noise protocol corrupts for data of ``num_views`` views (none with ``noise`` off)."""
        if not self.noise:
            return []
        return noise_subsets(num_views, self.noise_subset_size, self.noise_max_subsets, self.noise_seed)

    def removals(self, num_views: int) -> list[tuple[int, ...]]:
        """The view sets the missing-view protocol removes (each view, each noise subset; none with ``missing`` off)."""
        return removal_sets(num_views, self.subsets(num_views)) if self.missing else []
