"""The documented domains of the models' numeric constructor arguments, and the one check of them.

Each model class declares next to its constructor ``domains``: {argument: :class:`Domain`}, and a dict of
domains for a dict-valued argument (``optim``: :data:`mnp.framework.optim.OPTIM_DOMAINS`). :func:`check_domains`
is called by every constructor (the Python API) and by :mod:`mnp.cli.validate` on the config, before
anything is built, so both refuse the same values in the same one line, e.g.
``model.optim.clip_norm must be > 0 (or null), got -0.1``. The table of model keys in docs/usage.md is generated
from the same declarations (``python -m mnp.tools.docgen``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from mnp.checks import is_finite, is_int


@dataclass(frozen=True)
class Domain:
    """Numbers in [low, high] (either end open or absent), integers only with ``integer``; ``null`` also
    accepts None, ``words`` these strings; ``items``: a list whose every item lies in the domain."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    null: bool = False
    words: tuple[str, ...] = ()
    items: bool = False

    def text(self) -> str:
        """What the domain accepts, as the error messages and the docs say it."""
        lo, hi = self.low, self.high
        if self.integer:
            core = f"an integer >= {lo:g}" if lo is not None else "an integer"
        elif lo is not None and hi is not None:
            core = f"in {'(' if self.low_open else '['}{lo:g}, {hi:g}{')' if self.high_open else ']'}"
        elif lo is not None:
            core = f"{'>' if self.low_open else '>='} {lo:g}"
        else:
            core = f"{'<' if self.high_open else '<='} {hi:g}"
        if self.items:
            core = f"a list of {'integers' + core[len('an integer') :] if self.integer else 'numbers ' + core}"
        extras = [*self.words, *(["null"] if self.null else [])]
        return core + (f" (or {' or '.join(extras)})" if extras else "")

    def holds(self, value) -> bool:
        if value is None:
            return self.null
        if isinstance(value, str):
            return value in self.words
        if self.items:
            return isinstance(value, Sequence) and all(self._number_in(v) for v in value)
        return self._number_in(value)

    def _number_in(self, v) -> bool:
        if not is_finite(v):
            return False
        if self.integer and not is_int(v):
            return False
        if self.low is not None and (v <= self.low if self.low_open else v < self.low):
            return False
        return self.high is None or (v < self.high if self.high_open else v <= self.high)


COUNT = Domain(1, integer=True)  # sizes, sample counts
NATURAL = Domain(0, integer=True)  # epochs, depths
POSITIVE = Domain(0, low_open=True)  # scales, learning rates, temperatures
NON_NEGATIVE = Domain(0)  # loss weights, penalties
UNIT = Domain(0, 1)  # momenta, decay factors


def optional(domain: Domain) -> Domain:
    """``domain`` or null."""
    return replace(domain, null=True)


def each(domain: Domain) -> Domain:
    """A list of values of ``domain``."""
    return replace(domain, items=True)


def check_domains(domains: Mapping, values: Mapping, prefix: str = "model.") -> None:
    """Raise a one-line ValueError naming ``prefix + key`` for the first value of ``values`` outside its
    declared domain (keys without a domain, and a dict-valued argument given as null, are not checked)."""
    for key, domain in domains.items():
        if key not in values:
            continue
        value = values[key]
        if isinstance(domain, Mapping):
            if isinstance(value, Mapping):
                check_domains(domain, value, f"{prefix}{key}.")
        elif not domain.holds(value):
            raise ValueError(f"{prefix}{key} must be {domain.text()}, got {value!r}")
