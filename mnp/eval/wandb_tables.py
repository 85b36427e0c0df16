"""One run's test-time curves as tables for wandb (``logger=wandb``): plain columns and rows, so that
:mod:`mnp.cli.wandb_utils` logs them as ``wandb.Table`` with a chart each, and a workspace can overlay
(and, merging the runs' tables, average) seeds.

- ``noise``: ``sigma``, ``acc``, ``ece`` per noise level (the ``noise/acc@<σ>`` keys), σ ascending.
- ``reliability``: the reliability diagram's bins: ``bin`` (its range), ``lo``, ``hi``, ``confidence``,
  ``accuracy``, ``count`` (an empty bin's confidence and accuracy are empty cells); the bins of
  :func:`mnp.eval.metrics.reliability`, from which ``test/ece`` is computed.
- ``missing``: ``removed`` (``none``: the clean test, ``v<k>``: view k removed), ``acc``, ``ece``.
- ``ood``: ``ood_set``, ``auroc``, ``aupr``, ``fpr95``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import torch

from mnp.eval.metrics import reliability

NOISE_KEY = re.compile(r"^noise/(acc|ece)@(.+)$")
MISSING_KEY = re.compile(r"^missing/(acc|ece)@v(\d+)$")
OOD_KEY = re.compile(r"^ood/(.+)/auroc$")


@dataclass
class Table:
    """A table and its charts: ``(kind, x, y)`` with kind ``line`` or ``bar`` (x is a bar's label)."""

    columns: list[str]
    rows: list[list]
    charts: list[tuple[str, str, str]]


def number(value) -> float | None:
    """A table cell: a finite float, else None (an empty cell, left out of the UI's means)."""
    return float(value) if value is not None and math.isfinite(float(value)) else None


def noise_table(results: dict) -> Table | None:
    levels: dict[float, dict[str, float]] = {}
    for key, value in results.items():
        if m := NOISE_KEY.match(key):
            levels.setdefault(float(m.group(2)), {})[m.group(1)] = number(value)
    rows = [[s, v.get("acc"), v.get("ece")] for s, v in sorted(levels.items())]
    return Table(["sigma", "acc", "ece"], rows, [("line", "sigma", "acc"), ("line", "sigma", "ece")]) if rows else None


def reliability_table(probs: np.ndarray, labels: np.ndarray, n_bins: int = 15) -> Table:
    rel = reliability(torch.as_tensor(probs), torch.as_tensor(labels).long(), n_bins)
    edges = np.linspace(0, 1, n_bins + 1)
    rows = [
        [f"{lo:.2f}-{hi:.2f}", float(lo), float(hi), number(c) if n else None, number(a) if n else None, int(n)]
        for lo, hi, c, a, n in zip(
            edges[:-1], edges[1:], rel["confidence"].tolist(), rel["accuracy"].tolist(), rel["count"].tolist()
        )
    ]
    return Table(["bin", "lo", "hi", "confidence", "accuracy", "count"], rows, [("bar", "bin", "accuracy")])


def missing_table(results: dict) -> Table | None:
    views: dict[int, dict[str, float]] = {}
    for key, value in results.items():
        if m := MISSING_KEY.match(key):
            views.setdefault(int(m.group(2)), {})[m.group(1)] = number(value)
    if not views:
        return None
    rows = [["none", number(results.get("test/acc")), number(results.get("test/ece"))]] + [
        [f"v{k}", v.get("acc"), v.get("ece")] for k, v in sorted(views.items())
    ]
    return Table(["removed", "acc", "ece"], rows, [("bar", "removed", "acc"), ("bar", "removed", "ece")])


def ood_table(results: dict) -> Table | None:
    """Each OOD set's detection metrics, the model's own uncertainty as the score."""
    rows = [
        [
            m.group(1),
            number(v),
            number(results.get(f"ood/{m.group(1)}/aupr")),
            number(results.get(f"ood/{m.group(1)}/fpr95")),
        ]
        for k, v in sorted(results.items())
        if (m := OOD_KEY.match(k))
    ]
    return (
        Table(["ood_set", "auroc", "aupr", "fpr95"], rows, [("bar", "ood_set", y) for y in ("auroc", "aupr", "fpr95")])
        if rows
        else None
    )


def run_tables(
    results: dict, probs: np.ndarray | None = None, labels: np.ndarray | None = None, n_bins: int = 15
) -> dict[str, Table]:
    """The tables of one run that it has data for, by name."""
    tables = {"noise": noise_table(results), "missing": missing_table(results), "ood": ood_table(results)}
    if probs is not None and labels is not None and len(labels):
        tables["reliability"] = reliability_table(probs, labels, n_bins)
    return {name: t for name, t in tables.items() if t is not None}
