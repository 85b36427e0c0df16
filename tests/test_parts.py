"""MNP from its parts (mnp.model.parts): the parts' nodes, their one-line errors, and checkpoints from before the parts.

``tests/data/mnp_flat_checkpoint/`` was written by commit 62322e7 (the flat 50-argument constructor):
``python train.py model=mnp dataset=synthetic dataset.num_views=2 trainer.max_epochs=3 model.d_e=8
model.memory_size=6 model.view_weighting=distance model.warmup_epochs=1 seed=0``, and ``expected.npz`` holds
that commit's ``mnp.load(last.ckpt).predict_proba`` of 40 fixed rows (5 of them far from view 1's context).
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import numpy as np
import pytest
import torch

import mnp
from mnp.cli.validate import ConfigError, check_types
from mnp.model import MNP
from mnp.model.parts import PARTS, AggregationPart, MemoryPart, MNPSpec, ViewWeightingPart, as_part, plain
from mnp.runs.migrations import FLAT, nest_flat, under_built_in

OLD = Path(__file__).parent / "data" / "mnp_flat_checkpoint"


def part_settings(cls: type, prefix: str) -> set[tuple[str, str]]:
    """(part path, setting) of every leaf setting of ``cls``, a nested part's included."""
    hints, out = typing.get_type_hints(cls), set()
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out |= part_settings(hints[f.name], f"{prefix}.{f.name}")
        else:
            out.add((prefix, f.name))
    return out


def test_every_flat_argument_has_one_home_and_every_setting_one_flat_name():
    """The mapping that reads old checkpoints covers the parts exactly: each old key lands on a distinct setting,
    and no setting of a part lacks its old key (except the optimiser's, which were nested already, and the
    configs' warm-up fraction, which the config resolves before the model is built)."""
    homes = list(FLAT.values())
    assert len(set(homes)) == len(homes)
    settings = set().union(*(part_settings(cls, name) for name, cls in PARTS.items()))
    optimiser_own = {("optim", f.name) for f in dataclasses.fields(PARTS["optim"])} - set(homes)
    assert set(homes) - {("warmup", "fraction")} == settings - optimiser_own
    assert optimiser_own == {
        ("optim", k) for k in ("lr", "eps", "eps_placement", "weight_decay", "schedule", "milestones", "values")
    }


def test_nest_flat_moves_each_key_into_its_part_and_keeps_the_rest():
    old = {
        "num_classes": 3,
        "view_dims": [4, 2],
        "memory_size": 400,
        "view_weighting": "distance",
        "distance_power": 2.0,
        "clip_norm": 0.1,
        "optim": {"lr": 0.01},
        "fast": True,
    }
    assert nest_flat(old) == {
        "num_classes": 3,
        "view_dims": [4, 2],
        "fast": True,
        "memory": {"size": 400},
        "aggregation": {"view_weighting": {"mode": "distance", "power": 2.0}},
        "optim": {"lr": 0.01, "clip_norm": 0.1},
    }
    new = {"memory": {"size": 400}, "optim": {"lr": 0.01}}
    assert nest_flat(new) == new  # already nested: unchanged


def test_a_saved_node_is_read_over_its_parts_built_in_defaults_nested_alike():
    """What a run used: its saved settings, and the built-in default of each setting it lacks; ``keep`` limits the
    filled keys to today's node."""
    built_in = dataclasses.asdict(AggregationPart())
    saved = {"modality_mask": False, "view_weighting": {"mode": "distance"}}
    used = under_built_in(built_in, saved)
    assert used == {
        **built_in,
        "modality_mask": False,
        "view_weighting": {**built_in["view_weighting"], "mode": "distance"},
    }
    assert (
        AggregationPart(**{**used, "view_weighting": ViewWeightingPart(**used["view_weighting"])}).modality_mask
        is False
    )
    today = {"view_dropout": 0.25, "view_weighting": {"power": 2.0}}
    assert under_built_in(built_in, saved, today) == {
        "modality_mask": False,
        "view_dropout": built_in["view_dropout"],
        "view_weighting": {"mode": "distance", "power": built_in["view_weighting"]["power"]},
    }
    assert under_built_in(built_in, None, {}) == {}


def test_a_part_takes_its_node_a_part_or_nothing():
    assert as_part(MemoryPart, None, "memory") == MemoryPart()
    assert as_part(MemoryPart, {"size": 40}, "memory") == MemoryPart(size=40)
    given = MemoryPart(size=7)
    assert as_part(MemoryPart, given, "memory") is given
    agg = as_part(AggregationPart, {"view_weighting": {"mode": "distance", "quantile": 0.9}}, "aggregation")
    assert agg.view_weighting == ViewWeightingPart("distance", 0.9, 1.0)


@pytest.mark.parametrize(
    "value,message",
    [
        ({"sise": 3}, "model.memory has no setting 'sise'; it takes size, init, trainable, update, jstar, write"),
        (5, "model.memory must be a mapping of its settings, got 5"),
        ({"size": 0}, "model.memory.size must be an integer >= 1, got 0"),
        ({"write": "sometimes"}, "unknown model.memory.write 'sometimes'"),
    ],
)
def test_a_bad_part_node_is_one_line_naming_its_key(value, message):
    with pytest.raises(ValueError) as e:
        MNP(3, [4], memory=value)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_nested_part_setting_is_refused_naming_its_whole_key():
    with pytest.raises(ValueError, match=r"^model\.aggregation\.view_weighting\.quantile must be in \(0, 1\], got 0$"):
        MNP(3, [4], aggregation={"view_weighting": {"mode": "distance", "quantile": 0}})
    with pytest.raises(ValueError, match="^unknown model.aggregation.view_weighting.mode 'far'"):
        MNP(3, [4], aggregation={"view_weighting": {"mode": "far"}})


def test_the_config_validation_checks_a_part_node_before_anything_is_built():
    node = {"_target_": "mnp.model.MNP", "memory": {"size": 10, "sise": 3}}
    with pytest.raises(ConfigError, match="^model.memory has no setting 'sise'; it takes size, init"):
        check_types("model", node)
    with pytest.raises(ConfigError, match="^model.aggregation.view_weighting.power must be a number, got 'x'$"):
        check_types("model", {"_target_": "mnp.model.MNP", "aggregation": {"view_weighting": {"power": "x"}}})


def test_the_constructor_reads_each_part_where_its_block_is_built():
    model = MNP(
        3,
        [4, 5],
        encoder={"d_e": 8, "projection": "linear"},
        memory={"size": 6},
        aggregation={"view_weighting": {"mode": "distance"}},
        decoder={"train": False},
        optim={"lr": 0.02},
    )
    assert model.encoders[0].projection[0].out_features == 8 and model.memory.per_class == 2
    assert torch.isnan(model.distance_ref).all() and model.distance_ref.shape == (2,)  # eq. 8′'s reference, unfitted
    assert not any(p.requires_grad for p in model.decoder.parameters())
    assert model.configure_optimizers()["optimizer"].param_groups[0]["lr"] == 0.02
    assert isinstance(model.spec, MNPSpec) and model.spec.optim.lr == 0.02


def test_the_saved_arguments_are_plain_settings_that_rebuild_the_same_model():
    model = MNP(
        3,
        [4, 5],
        encoder={"d_e": 8},
        memory=MemoryPart(size=6),
        optim={"milestones": [2], "values": [1e-3, 1e-4], "schedule": "piecewise"},
    )
    hp = dict(model.hparams)
    assert hp["memory"] == plain(MemoryPart(size=6)) and hp["optim"]["milestones"] == [2]  # lists, not tuples
    assert MNP(**hp).spec == model.spec


def test_spec_replace_changes_one_setting_of_one_part():
    spec = MNP(3, [4]).spec
    changed = spec.replace("aggregation.view_weighting", mode="distance", power=2.0)
    assert changed.aggregation.view_weighting == ViewWeightingPart("distance", 0.99, 2.0)
    assert changed.aggregation.kind == spec.aggregation.kind and changed.memory == spec.memory
    assert spec.replace("loss", beta=0.0).loss.beta == 0.0


def test_a_checkpoint_written_before_the_parts_predicts_as_it_did():
    """The flat checkpoint loads (its constructor arguments read through nest_flat) and gives the probabilities
    the commit that wrote it gave, eq. 8′ included, up to float32 rounding: the file was written on another
    machine."""
    predictor = mnp.load(OLD / "last.ckpt")
    expected = np.load(OLD / "expected.npz")
    assert predictor.model.spec.aggregation.view_weighting.mode == "distance"
    assert predictor.model.spec.memory.size == 6 and predictor.model.spec.encoder.d_e == 8
    probs, unc = predictor.predict_proba([expected["view0"], expected["view1"]], return_uncertainty=True)
    # another CPU's SIMD width sums in another order: float32 values near 1 move by a few ulps (1 ulp = 1.2e-7 there;
    # 1.5e-7 seen); 2e-6 is about 16 ulps, while a wrong setting read from the old keys moves them by 1e-3 or more
    np.testing.assert_allclose(probs, expected["probs"], rtol=0, atol=2e-6)
    np.testing.assert_allclose(unc, expected["unc"], rtol=0, atol=2e-6)
