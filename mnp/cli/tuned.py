"""``require_tuned`` (experiment=paper_tuned, conformal): a model runs only where its tuning study on the dataset is
applied (``conf/tuned/<model>_<dataset>.yaml`` sets ``tuned_from``; docs/tuning.md)."""

from __future__ import annotations

from collections.abc import Mapping

from mnp.cli.errors import ConfigError


def check_tuned(c: Mapping) -> None:
    """``require_tuned`` (experiment=paper_tuned): the model's tuned config on the dataset must have been loaded."""
    if not c.get("require_tuned") or c.get("tuned_from"):
        return
    model, dataset = c.get("model", {}).get("name", "?"), c.get("dataset", {}).get("name", "?")
    if model == "mnp_official":
        raise ConfigError("mnp_official is the authors' configuration and is not tuned: its cells are paper_main's")
    raise ConfigError(
        f"experiment {c.get('experiment_name')} runs at tuned defaults, but conf/tuned/{model}_{dataset}.yaml does not "
        f"exist: finish the study (python train.py -m experiment=tune model={model} dataset={dataset}) and apply it "
        f"(python -m mnp.tune.apply <log dir>/tune/{model}_{dataset}, docs/tuning.md)"
    )
