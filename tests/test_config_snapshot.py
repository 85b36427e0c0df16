"""The composed config of every (model, dataset) pair, frozen: a refactoring of conf/ (moving a value
into a shared file, a defaults list, an interpolation) must not change what any run gets.

``tests/data/resolved_configs.json`` holds, for each ``conf/model/<m>.yaml`` × ``conf/dataset/<d>.yaml``,
``train.yaml`` as composed (before ``mnp.cli.validate.resolve_auto``), resolved to plain values, every
top-level key except ``paths``. A value that interpolates the environment or the run's paths
(``dataset.data_dir: ${paths.data_dir}``, ``torch_threads: ${oc.env:...}``) is kept as its unresolved
text, so the file does not depend on the machine.

A change of a config value on purpose: regenerate the file and commit it with the change,
``python tests/test_config_snapshot.py --write``; the diff of the JSON shows what moved.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from mnp.cli.resolvers import register_resolver

pytestmark = pytest.mark.slow  # module fixtures train whole runs

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
SNAPSHOT = ROOT / "tests" / "data" / "resolved_configs.json"
OUT = "/nonexistent/mnp-config-snapshot"  # paths.output_dir: never created, only composed
# an interpolation whose value depends on the machine or the run directory
ENV_DEPENDENT = re.compile(r"\$\{(paths\.|oc\.env:|hydra:)")
# per pair: {dotted key: (snapshot value, new value)} of the differences made on purpose, each with why
EXPECTED_CHANGES: dict[str, dict] = {}


def names(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def pairs() -> list[tuple[str, str]]:
    return [(m, d) for m in names("model") for d in names("dataset")]


def _plain(raw, resolved):
    """``resolved``, except leaves whose ``raw`` text interpolates the environment or the run's paths."""
    if isinstance(raw, dict):
        return {k: _plain(raw[k], resolved[k]) for k in raw}
    if isinstance(raw, list):
        return [_plain(r, v) for r, v in zip(raw, resolved)]
    if isinstance(raw, str) and ENV_DEPENDENT.search(raw):
        return raw
    return resolved


def compose_pair(model: str, dataset: str) -> dict:
    """The composed ``train.yaml`` of one pair as plain values (call inside ``initialize_config_dir``)."""
    overrides = [f"model={model}", f"dataset={dataset}", f"paths.output_dir={OUT}", "logger=none"]
    if dataset == "custom":
        overrides.append("dataset.path=x.npz")  # its one mandatory value
    cfg = compose("train", overrides=overrides)
    raw = OmegaConf.to_container(cfg, resolve=False)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    raw.pop("paths", None)
    return _plain(raw, resolved)


def resolved_configs() -> dict[str, dict]:
    register_resolver()  # ${mnp_warmup:W,E} of conf/model_dataset (also when run as a script, without conftest)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return {f"{m}/{d}": compose_pair(m, d) for m, d in pairs()}
    finally:
        GlobalHydra.instance().clear()


def flatten(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: {}}
    return {prefix[:-1]: node}


@pytest.fixture(scope="module")
def current() -> dict[str, dict]:
    return resolved_configs()


@pytest.fixture(scope="module")
def snapshot() -> dict[str, dict]:
    return json.loads(SNAPSHOT.read_text())


def test_snapshot_covers_every_model_and_dataset(current, snapshot):
    assert sorted(current) == sorted(snapshot), (
        "a model or dataset config was added or removed: regenerate with python tests/test_config_snapshot.py --write"
    )


@pytest.mark.parametrize("pair", [f"{m}/{d}" for m, d in pairs()])
def test_composed_config_is_the_snapshot(pair, current, snapshot):
    if pair not in snapshot:
        pytest.skip(f"{pair} is not in the snapshot (see test_snapshot_covers_every_model_and_dataset)")
    old, new = flatten(snapshot[pair]), flatten(current[pair])
    diff = {
        k: (old.get(k, "<absent>"), new.get(k, "<absent>"))
        for k in sorted(old.keys() | new.keys())
        if old.get(k, "<absent>") != new.get(k, "<absent>")
    }
    assert diff == EXPECTED_CHANGES.get(pair, {}), f"{pair}: (snapshot, now) differ at {diff}"


def test_snapshot_is_machine_independent(snapshot):
    text = json.dumps(snapshot)
    assert OUT not in text
    assert str(Path.home()) not in text and str(ROOT) not in text


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: python tests/test_config_snapshot.py --write   (regenerates {SNAPSHOT.relative_to(ROOT)})")
    SNAPSHOT.parent.mkdir(exist_ok=True)
    SNAPSHOT.write_text(json.dumps(resolved_configs(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT.relative_to(ROOT)}")
