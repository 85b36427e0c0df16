"""A nested config as one level of dotted keys: how run configs are compared and named."""

from __future__ import annotations

from typing import Any


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as {"a.b.c": value}."""
    if not isinstance(d, dict):
        return {prefix[:-1]: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}{k}."))
    return out
