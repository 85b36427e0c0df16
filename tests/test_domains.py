"""The models' numeric keys (mnp.framework.domains): every numeric constructor argument of every model class has a
declared domain, its default lies in it, and a value outside it is refused in one line naming the key, by the
constructor (Python) and by the config validation (CLI) alike."""

import dataclasses
import importlib
import inspect
import math
import re
import typing
from collections.abc import Mapping
from pathlib import Path

import pytest
from cfg_utils import compose_train
from hydra.utils import get_class
from omegaconf import OmegaConf, open_dict

from mnp.cli.validate import ConfigError, resolve_auto, validate
from mnp.framework.domains import Domain
from mnp.framework.optim import OPTIM_DOMAINS, make_optimizer
from mnp.framework.routine import Routine

ROOT = Path(__file__).resolve().parents[1]
MODULES = [
    "mnp.model.model",
    *sorted(f"baselines.{p.stem}" for p in (ROOT / "baselines").glob("*.py") if p.stem != "__init__"),
]
DATA_ARGS = {"num_classes", "view_dims"}  # given by the data, checked by Routine
SET_BY_THE_MODELS = {"params", "max_epochs"}  # make_optimizer's arguments the models fill in (trainer.max_epochs)


def model_classes() -> list[type]:
    for name in MODULES:
        importlib.import_module(name)
    found, todo = [], list(Routine.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__ in MODULES and cls not in found:
            found.append(cls)
    return sorted(found, key=lambda c: c.__name__)


CLASSES = model_classes()


def numeric(hint) -> bool:
    """int or float, alone, in a union or as list items (bool is not numeric)."""
    return hint in (int, float) or any(numeric(a) for a in typing.get_args(hint) if a is not type(None))


def arguments(fn) -> dict[str, inspect.Parameter]:
    return {n: p for n, p in inspect.signature(fn).parameters.items() if n != "self"}


def outside(domain: Domain) -> list:
    """Values ``domain`` refuses: past each bound, a fraction for an integer, NaN, null where not allowed."""
    values = []
    if domain.low is not None:
        values.append(domain.low if domain.low_open else domain.low - 1)
    if domain.high is not None:
        values.append(domain.high if domain.high_open else domain.high + 1)
    if domain.integer:
        values.append(domain.low + 0.5)
    values.append(math.nan)
    values = [[v] for v in values] if domain.items else values
    return values + ([] if domain.null else [None])


def flat_domains(domains: Mapping, prefix: str = "") -> list[tuple[str, Domain]]:
    """(dotted key, domain) of every declared domain, those of a dict-valued argument or a part (MNP) included."""
    out = []
    for key, domain in domains.items():
        out += flat_domains(domain, f"{prefix}{key}.") if isinstance(domain, Mapping) else [(prefix + key, domain)]
    return out


def nested(key: str, value) -> dict:
    """``a.b.c`` = value as the keyword arguments {a: {b: {c: value}}}."""
    head, _, rest = key.partition(".")
    return {head: nested(rest, value) if rest else value}


def cases() -> list[tuple[type, str, Domain, object]]:
    """(class, dotted key below model., domain, refused value) for every declared domain."""
    return [(cls, key, d, v) for cls in CLASSES for key, d in flat_domains(cls.domains) for v in outside(d)]


def test_the_model_configs_are_these_classes():
    targets = {OmegaConf.load(p).get("_target_") for p in (ROOT / "conf" / "model").glob("*.yaml")} - {None}
    assert {get_class(t) for t in targets} == set(CLASSES)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_numeric_argument_has_a_domain_holding_its_default(cls):
    params = arguments(cls.__init__)
    hints = typing.get_type_hints(cls.__init__)
    need = {n for n in params if n not in DATA_ARGS and numeric(hints.get(n))}
    assert need <= cls.domains.keys(), f"{cls.__name__}: no declared domain for {sorted(need - cls.domains.keys())}"
    assert cls.domains.keys() <= params.keys(), (
        f"{cls.__name__}: domains of no argument {cls.domains.keys() - params.keys()}"
    )
    for name, domain in cls.domains.items():
        part = next((h for h in typing.get_args(hints[name]) if dataclasses.is_dataclass(h)), None)
        if part is not None:  # an MNP part (mnp.model.parts): its own numeric settings, each with a domain
            check_part(part, domain)
        elif isinstance(domain, Mapping):  # a dict-valued argument: the optimiser's keyword arguments
            assert hints[name] in (dict, dict | None) and domain is OPTIM_DOMAINS, name
        else:
            assert domain.holds(params[name].default), (
                f"{cls.__name__}.{name}={params[name].default!r}: {domain.text()}"
            )


def check_part(part: type, domains: Mapping) -> None:
    """Every numeric setting of ``part`` has a domain holding its default; a nested part likewise."""
    hints, fields = typing.get_type_hints(part), {f.name: f for f in dataclasses.fields(part)}
    need = {n for n in fields if numeric(hints[n])}
    assert need <= domains.keys() <= fields.keys(), (part.__name__, sorted(need ^ domains.keys()))
    defaults = part()
    for name, domain in domains.items():
        if isinstance(domain, Mapping):
            check_part(hints[name], domain)
        else:
            default = getattr(defaults, name)
            assert domain.holds(list(default) if isinstance(default, tuple) else default), f"{part.__name__}.{name}"


def test_every_numeric_optimiser_argument_has_a_domain_holding_its_default():
    params, hints = arguments(make_optimizer), typing.get_type_hints(make_optimizer)
    need = {n for n in params if n not in SET_BY_THE_MODELS and numeric(hints[n])}
    assert need == OPTIM_DOMAINS.keys()
    for name, domain in OPTIM_DOMAINS.items():
        default = params[name].default
        assert domain.holds(list(default) if isinstance(default, tuple) else default), name


@pytest.mark.parametrize("cls,key,domain,value", cases(), ids=lambda x: getattr(x, "__name__", repr(x)))
def test_a_value_outside_its_domain_is_refused_naming_the_key(cls, key, domain, value):
    kwargs = nested(key, value)
    expected = f"model.{key} must be {domain.text()}, got {value!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        cls(num_classes=3, view_dims=[4, 3], **kwargs)


@pytest.mark.parametrize("model", sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml")))
def test_the_config_validation_refuses_the_same_values(tmp_path, model):
    """For every model config and every declared key it holds, the value just past a bound: the same line."""
    cfg = compose_train(tmp_path, [f"model={model}", "dataset=handwritten"])
    resolve_auto(cfg)
    validate(cfg)
    cls = get_class(cfg.model._target_)
    checked = 0
    for key, d in flat_domains(cls.domains):
        *parents, last = key.split(".")
        node = OmegaConf.select(cfg.model, ".".join(parents)) if parents else cfg.model
        if node is None or last not in node:
            continue
        bad = outside(d)[0]
        broken = cfg.copy()
        with open_dict(broken):
            (OmegaConf.select(broken.model, ".".join(parents)) if parents else broken.model)[last] = bad
        with pytest.raises(ConfigError, match=f"^{re.escape(f'model.{key} must be {d.text()}, got {bad!r}')}$"):
            validate(broken)
        checked += 1
    assert checked >= 2


def test_domains_read_as_the_docs_say():
    assert Domain(0, low_open=True, null=True).text() == "> 0 (or null)"
    assert Domain(1, integer=True, items=True).text() == "a list of integers >= 1"
    assert Domain(0, 1, high_open=True).text() == "in [0, 1)"
    assert Domain(0, low_open=True, words=("data",)).text() == "> 0 (or data)"
    inside = Domain(0, 1, high_open=True)
    assert inside.holds(0) and inside.holds(0.999) and not inside.holds(1) and not inside.holds(True)
    assert not inside.holds("0.5") and not inside.holds(math.inf) and not Domain(0).holds(math.inf)
