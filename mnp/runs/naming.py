"""How a run is named where runs are grouped: the wandb group of a training run and the report's cell
use the same dataset label and group, so the report's tables join the runs table on ``group``."""

from __future__ import annotations

from pathlib import Path


def data_label(dataset: str, dataset_cfg) -> str:
    """A run's dataset as runs are grouped: a ``dataset=custom`` run by its data file's stem (``dataset.path``),
    so runs on different files get their own groups, columns and best marks; any other dataset by its name."""
    path = (dataset_cfg or {}).get("path") if dataset == "custom" else None
    return Path(str(path)).stem if path else dataset


def group_name(experiment: str, model: str, dataset: str, variant: str | None = None) -> str:
    """``<experiment>/<model>_<dataset>[_<variant>]``: the runs whose mean over seeds is one table cell."""
    return f"{experiment}/{model}_{dataset}" + (f"_{variant}" if variant else "")
