"""The checks of one config value that every layer shares, each rule stated once: integers, real numbers,
fractions and choices. Each check returns the value or raises ``error`` (ValueError unless given: the CLI's
ConfigError, the data layer's DataError) in one line naming the key. The standard library only, so the data layer
imports it without importing the framework (docs/architecture.md)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence


def is_int(v) -> bool:
    """An integer, not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_real(v) -> bool:
    """A real number (an integer too, inf and NaN too), not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def is_finite(v) -> bool:
    """A finite real number, not a bool."""
    return is_real(v) and math.isfinite(v)


def check_int(key: str, v, low: int, high: int | None = None, error: type[Exception] = ValueError) -> int:
    """``v`` as an integer in [low, high] (``high`` None: >= low)."""
    if not is_int(v) or v < low or (high is not None and v > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise error(f"{key} must be an integer {bounds}, got {v!r}")
    return int(v)


def check_fraction(
    key: str, v, upper_open: bool = True, lower_open: bool = False, error: type[Exception] = ValueError
) -> float:
    """``v`` as a fraction in [0, 1), either end open or closed as given."""
    ok = is_finite(v) and (v > 0 if lower_open else v >= 0) and (v < 1 if upper_open else v <= 1)
    if not ok:
        lo, hi = "(0" if lower_open else "[0", "1)" if upper_open else "1]"
        raise error(f"{key} must be a fraction in {lo}, {hi}, got {v!r}")
    return float(v)


def choice(name: str, value: str, options: Sequence[str]) -> str:
    """``value`` if it is one of ``options``; otherwise fail naming the switch."""
    if value not in options:
        raise ValueError(f"unknown {name} '{value}'; choose one of {', '.join(options)}")
    return value
