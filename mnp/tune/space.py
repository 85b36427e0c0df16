"""A search space declared in ``conf/tune_space/<model>.yaml``: one Hydra sweep expression per config key.

The grammar is Hydra's override grammar, as for any sweep: ``choice(a, b, c)`` (categorical), ``interval(lo, hi)``
(uniform), ``tag(log, interval(lo, hi))`` (log-uniform), ``range(lo, hi, step)`` (integers). A key whose value is
``epochs(0.5, 1, 2)`` is ``trainer.max_epochs`` as multiples of the dataset's own epochs (rounded, at least 1), so one
space serves every dataset. Each key is also the name of an Optuna parameter."""

from __future__ import annotations

import re
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep, Transformer
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

EPOCHS = re.compile(r"^\s*epochs\((.*)\)\s*$")


class SpaceError(ValueError):
    """A search space that cannot be read; the message names the key."""


def epochs_choice(spec: str, base_epochs: int, key: str) -> CategoricalDistribution:
    """``epochs(0.5, 1, 2)`` with the dataset's ``base_epochs``: the distinct epoch counts, ascending."""
    try:
        factors = [float(f) for f in EPOCHS.match(spec).group(1).split(",")]
    except ValueError:
        raise SpaceError(f"{key}: epochs(...) takes positive factors of the dataset's epochs, got {spec!r}") from None
    if not factors or min(factors) <= 0:
        raise SpaceError(f"{key}: epochs(...) takes positive factors of the dataset's epochs, got {spec!r}")
    return CategoricalDistribution(sorted({max(1, round(f * base_epochs)) for f in factors}))


def distribution(key: str, spec: Any, base_epochs: int | None = None) -> BaseDistribution:
    """The Optuna distribution of one declared key."""
    text = str(spec)
    if EPOCHS.match(text):
        if base_epochs is None:
            raise SpaceError(f"{key}: epochs(...) needs the dataset's trainer.max_epochs, and the config has none")
        return epochs_choice(text, base_epochs, key)
    try:
        override = OverridesParser.create().parse_override(f"{key}={text}")
    except Exception as e:  # noqa: BLE001 - Hydra's grammar errors come in several types
        raise SpaceError(f"{key}: {text!r} is not a sweep expression ({' '.join(str(e).split())[:160]})") from None
    value = override.value()
    if isinstance(value, ChoiceSweep):
        choices = [_plain(x, key) for x in override.sweep_iterator(transformer=Transformer.encode)]
        return CategoricalDistribution(choices)
    if isinstance(value, RangeSweep):
        if any(isinstance(v, float) for v in (value.start, value.stop, value.step)):
            raise SpaceError(f"{key}: range() takes integers; use interval() for a continuous range")
        start, stop, step = int(value.start), int(value.stop), int(value.step)
        return IntDistribution(start, start + step * ((stop - 1 - start) // step), step=step)
    if isinstance(value, IntervalSweep):
        lo, hi, log = value.start, value.end, "log" in value.tags
        if log and lo <= 0:
            raise SpaceError(f"{key}: a log interval needs a lower end > 0, got {lo}")
        if isinstance(lo, int) and isinstance(hi, int):
            return IntDistribution(lo, hi, log=log)
        return FloatDistribution(float(lo), float(hi), log=log)
    raise SpaceError(f"{key}: {text!r} is a fixed value, not a search range; set it in the model's config instead")


def _plain(x: Any, key: str):
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    raise SpaceError(f"{key}: a choice takes numbers, strings or booleans, got {x!r}")


def override_value(dist: BaseDistribution, value: Any) -> str:
    """A suggested value as the override's right-hand side: floats to 4 significant digits (run directory names
    stay short; a finer grid would not be resolved by k-fold scores on a few hundred rows)."""
    if isinstance(dist, FloatDistribution):
        return f"{float(value):.4g}"
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def contains(dist: BaseDistribution, value: Any) -> bool:
    """Whether ``value`` (a config's default) is a point of ``dist``."""
    if isinstance(dist, CategoricalDistribution):
        return any(_same(value, c) for c in dist.choices)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return dist.low <= value <= dist.high


def _same(value: Any, choice: Any) -> bool:
    if isinstance(choice, str) and not isinstance(value, str):
        return choice.replace(" ", "") == str(value).replace(" ", "")  # choice([512,256]) is encoded as text
    return value == choice and isinstance(value, bool) == isinstance(choice, bool)


def as_choice(dist: BaseDistribution, value: Any) -> Any:
    """``value`` as ``dist`` stores it (a categorical's own element), for enqueueing a config's defaults."""
    if isinstance(dist, CategoricalDistribution):
        return next(c for c in dist.choices if _same(value, c))
    return value
