"""Choose a default on validation rows: the decision records of ``results/decisions/<model>_<dataset>.csv``.

The selection protocol (docs/method.md §5.4): candidates are trained by ``experiment=select`` (the training rows
less a fixed, stratified 20 % that the whole evaluation then reads; every metric is ``val/...``), and one
criterion, declared up front, picks among them. This module reads ``val/`` metrics only: a run evaluated on the
test split, or a criterion that is not a ``val/`` metric, is refused.

    python -m mnp.tools.select decide logs/select --model mnp --dataset cub --decision memory_size \\
        --match model.memory.size --criterion val/nll --out results/decisions/mnp_cub.csv
    python -m mnp.tools.select infer logs/select --model mnp --dataset cub --decision view_weighting \\
        --criterion val/noise/acc_mean --higher --out results/decisions/mnp_cub.csv

``decide`` compares the runs whose variant contains a ``--match`` string with the runs of today's defaults (no
variant, or the variant ``--base`` names: the candidate ``default``); ``--rival MODEL`` adds another model's
defaults on the same dataset as the candidate ``model=MODEL`` (a whole configuration, e.g. ``mnp_official``). ``infer`` scores inference-only settings on the checkpoints of the defaults' selection runs: eq. 8′'s
view weighting over ``distance_quantile`` × ``distance_power``, or with ``--samples`` the decoder's S at
prediction (``decoder.eval_samples``). Each writes one
row per candidate (mean of every ``val/`` metric over the seeds the candidates share, the criterion's paired
difference to ``default`` and its paired t-test p-value) with a ``chosen`` flag, replacing that decision's
earlier rows in ``--out``. The candidate with the best mean criterion is chosen; a tie keeps ``default``. With
``--require-p P`` (a rule declared before the runs are seen) only candidates better than ``default`` at paired
p < P may replace it; the record's ``rule`` column states which rule chose.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from datamodules.base import MultiViewDataModule
from mnp.cli.errors import UnfinishedRun
from mnp.model.inference_settings import INFERENCE_ONLY
from mnp.model.parts import PARTS, DecoderPart, ViewWeightingPart
from mnp.runs.flat import flatten
from mnp.runs.migrations import modern_key, modern_variant, nest_flat, under_built_in
from mnp.tools.report.relabel import with_built_in_defaults
from mnp.tools.report.report_runs import DuplicateRun, Run, load, mixed_versions
from mnp.tools.select.decision_record import (
    DEFAULT,
    SelectionError,
    check_criterion,
    decide,
    unshared_seeds,
    val_metrics,
    validation_runs,
    write_decision,
)

VIEW_WEIGHTING = "aggregation.view_weighting"  # the parts the infer mode varies
DECODER = "decoder"
QUANTILES, POWERS = (0.9, 0.99, 1.0), (0.5, 1.0, 2.0)


def train_candidates(
    runs: list[Run], matches: list[str], excludes: list[str] = (), base: str = ""
) -> dict[str, dict[int, dict[str, float]]]:
    """{candidate: {seed: val metrics}}: the runs of variant ``base`` (the defaults', no variant, unless named) as
    ``default``, and those whose variant contains a match and no exclude."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    for r in runs:
        name = variant_of(r)
        if name == modern_variant(base):
            out.setdefault(DEFAULT, {})[r.seed] = val_metrics(r.metrics)
        elif name and any(m in name for m in matches) and not any(x in name for x in excludes):
            out.setdefault(name, {})[r.seed] = val_metrics(r.metrics)
    return out


def variant_of(run: Run) -> str:
    """The run's variant with today's keys (a run from before the parts says ``model.view_dropout=...``)."""
    return modern_variant(run.variant) if run.variant else ""


def rival_runs(loaded: list[Run], rivals: list[str], dataset: str) -> dict[str, list[Run]]:
    """{``model=<rival>``: its runs at its own defaults (no variant)} for each rival model."""
    out = {}
    for rival in rivals:
        runs = [r for r in validation_runs(loaded, rival, dataset) if not r.variant]
        if not runs:
            raise SelectionError(f"no experiment=select runs of model={rival} (its defaults) on {dataset}")
        out[f"model={rival}"] = runs
    return out


def overrides(run: Run) -> list[str]:
    """The model, dataset and trainer keys the run's command line set (its .hydra/overrides.yaml; else its variant,
    whose long names end in a hash)."""
    import yaml

    path = run.path / ".hydra" / "overrides.yaml"
    items = yaml.safe_load(path.read_text()) if path.is_file() else (run.variant or "").split(",")
    keys = [i.split("=", 1)[0] for i in items if "=" in i and i.startswith(("model.", "dataset.", "trainer."))]
    return [modern_key(k) for k in keys]


def settings(
    candidates: list[str], runs: list[Run], base: str = "", rivals: dict[str, list[Run]] | None = None
) -> dict[str, str]:
    """Each candidate's values, from its runs' resolved config, of every key that some candidate (or the base
    variant) overrides; a rival model's candidate, every model and dataset key where its config differs from the
    base's (:func:`rival_setting`)."""
    by_name = {(DEFAULT if variant_of(r) == modern_variant(base) else variant_of(r)): r for r in runs}
    own = [c for c in candidates if not c.startswith("model=")]
    keys = sorted({k for c in own if c != DEFAULT or base for k in overrides(by_name[c])})
    # a part's key that a run's config lacks (a switch added after the run): its built-in default, which the run used
    built_in = {"model": {n: asdict(part()) for n, part in PARTS.items()}}
    configs = {c: with_built_in_defaults(by_name[c].config, built_in) for c in own}
    out = {c: ",".join(f"{k}={_lookup(configs[c], k)}" for k in keys) for c in own}
    ref = by_name.get(DEFAULT)  # a rival is compared with the reference run of the same seed (dataset.seed differs)
    same_seed = {c: next(r for r in rs if r.seed == ref.seed) for c, rs in (rivals or {}).items()} if ref else {}
    return out | {c: rival_setting(same_seed[c], ref) for c in candidates if c.startswith("model=")}


def untrained_keys() -> set[str]:
    """The config keys no training reads: the model's name, the test-only dataset keys and the inference-only model
    keys (flattened, as :func:`mnp.runs.flat.flatten` names them)."""
    inference = {f"model.{part}.{key}" for part, keys in INFERENCE_ONLY.items() for key in keys}
    return {"model.name", *(f"dataset.{k}" for k in MultiViewDataModule.TEST_ONLY), *inference}


def rival_setting(rival: Run, base: Run) -> str:
    """What adopting a rival model's configuration sets: each model and dataset key whose value in the rival run's
    config differs from the base run's. The model's name, the test-only keys and the inference-only ones aside:
    those are decided afterwards on the chosen configuration's checkpoints (``infer --from-model``)."""
    mine, theirs = (flatten({g: r.config.get(g) or {} for g in ("model", "dataset")}) for r in (base, rival))
    skip = untrained_keys()
    keys = sorted(k for k in mine.keys() | theirs.keys() if k not in skip and mine.get(k) != theirs.get(k))
    return ",".join(f"{k}={theirs.get(k)}" for k in keys)


def _lookup(config: dict, key: str):
    node = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def view_weighting_variants(quantiles=QUANTILES, powers=POWERS) -> dict[str, dict]:
    """eq. 8 (``none``) and eq. 8′ over the grid of reference quantile q and power p."""
    out = {"view_weighting=none": {"mode": "none"}}
    for q in quantiles:
        for p in powers:
            out[f"view_weighting=distance q={q:g} p={p:g}"] = {"mode": "distance", "quantile": q, "power": p}
    return out


def sample_variants(counts: list[int]) -> dict[str, dict]:
    """The decoder's S at prediction (eq. 12 by Monte Carlo: S z-samples × S logit samples)."""
    return {f"eval_samples={n}": {"eval_samples": n} for n in counts}


def infer_candidates(
    runs: list[Run], current: dict, variants: dict[str, dict], part: str = VIEW_WEIGHTING
) -> dict[str, dict[int, dict[str, float]]]:
    """{candidate: {seed: val metrics}} of every variant of ``part`` (``variants``: name -> settings) on the
    checkpoints of ``runs`` (one trained setting); their own setting (``current``) is named ``default``, and is
    scored too when no variant equals it."""
    import pytorch_lightning as pl

    from mnp.cli.run_loading import load_finished_run
    from mnp.model.inference_settings import apply_inference_settings

    if not any(all(current.get(k) == v for k, v in settings.items()) for settings in variants.values()):
        variants = {DEFAULT: current} | variants  # the runs' own setting is always the reference, listed or not
    out: dict[str, dict[int, dict[str, float]]] = {}
    for r in sorted(runs, key=lambda r: r.seed):
        _, _, _, dm, model, _ = load_finished_run(r.path)
        if getattr(dm, "eval_split", "test") != "val":
            raise SelectionError(f"{r.path} does not evaluate on validation rows")
        for name, settings in variants.items():
            apply_inference_settings(model, {part: settings}, dm.train_views)
            pl.Trainer(
                logger=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                enable_checkpointing=False,
                accelerator="cpu",
            ).test(model, datamodule=dm, verbose=False)
            same = all(current.get(k) == v for k, v in settings.items())
            out.setdefault(DEFAULT if same else name, {})[r.seed] = val_metrics(model.test_results)
        print(f"{r.path}: {len(out)} variants scored", flush=True)
    return out


def current_view_weighting(runs: list[Run]) -> dict:
    """The view weighting of ``runs``' own config (a config from before the parts read through nest_flat)."""
    model = nest_flat(next((r.config.get("model") or {} for r in runs), {}))
    current = under_built_in(asdict(ViewWeightingPart()), (model.get("aggregation") or {}).get("view_weighting"))
    return {"mode": "none"} if current["mode"] == "none" else current


def current_samples(runs: list[Run]) -> tuple[dict, dict]:
    """The decoder's S at prediction in ``runs``' own config: the S it uses (``eval_samples``, else ``num_samples``),
    which names the variant ``default``, and the setting as the config holds it (``null`` when unset)."""
    decoder = under_built_in(
        asdict(DecoderPart()), nest_flat(next((r.config.get("model") or {} for r in runs), {})).get("decoder")
    )
    held = decoder["eval_samples"]
    used = held or decoder["num_samples"]
    return {"eval_samples": used}, {"eval_samples": "null" if held is None else held}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mnp.tools.select", description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["decide", "infer"], help="decide: trained candidates; infer: view weighting")
    ap.add_argument("dirs", nargs="+", help="directories holding experiment=select runs")
    ap.add_argument("--model", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--decision", required=True, help="the setting decided, e.g. memory_size")
    ap.add_argument("--match", action="append", default=[], help="decide: variants containing this are candidates")
    ap.add_argument("--exclude", action="append", default=[], help="decide: variants containing this are not")
    ap.add_argument("--rival", action="append", default=[], help="decide: another model whose defaults are a candidate")
    ap.add_argument(
        "--base",
        default="",
        help="the variant that is today's defaults (decide: the reference; infer: the checkpoints scored); "
        "default: the runs with no variant",
    )
    ap.add_argument(
        "--quantiles", type=float, nargs="+", default=list(QUANTILES), help="infer: eq. 8′'s reference quantiles q"
    )
    ap.add_argument("--powers", type=float, nargs="+", default=list(POWERS), help="infer: eq. 8′'s powers p")
    ap.add_argument(
        "--samples", type=int, nargs="+", help="infer: score the decoder's S at prediction (eval_samples) instead"
    )
    ap.add_argument(
        "--from-model",
        help="infer: score this model's runs for --model's record (the configuration its decision `configuration` "
        "chose, e.g. mnp_official)",
    )
    ap.add_argument("--criterion", default="val/nll", help="a val/ metric (default val/nll, lower is better)")
    ap.add_argument("--higher", action="store_true", help="a higher criterion is better (accuracies)")
    ap.add_argument(
        "--require-p",
        type=float,
        help="declared rule: a candidate replaces default only when its paired p against default is below this "
        "(default: the best mean wins)",
    )
    ap.add_argument("--status", default="decided", help="decided, or open (why) for a decision not settled yet")
    ap.add_argument("--note", default="")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        check_criterion(args.criterion)
        if args.out.is_dir():
            raise SelectionError(f"--out {args.out} is a directory; give the decision record's .csv file")
        loaded, jobs = load(args.dirs)
        if args.from_model and args.mode == "decide":
            raise SelectionError("--from-model names the runs infer scores; decide compares --model's runs")
        model = args.from_model or args.model
        runs = validation_runs(loaded, model, args.dataset)
        if not runs:
            raise SelectionError(f"no runs of {model} on {args.dataset} in {' '.join(args.dirs)}")
        warnings = [f"{j.status} job left out: {j.describe()}" for j in jobs if j.record.get("model") in (None, model)]
        if args.mode == "decide":
            if not args.match and not args.rival:
                raise SelectionError("decide needs --match or --rival: which runs are this decision's candidates")
            candidates = train_candidates(runs, args.match, args.exclude, args.base)
            rivals = rival_runs(loaded, args.rival, args.dataset)
            candidates |= {name: {r.seed: val_metrics(r.metrics) for r in rs} for name, rs in rivals.items()}
            setting = settings(list(candidates), runs, args.base, rivals)
            pooled = [r for r in runs if variant_of(r) in candidates or variant_of(r) == modern_variant(args.base)]
            pooled += [r for rs in rivals.values() for r in rs]
        else:
            base = [r for r in runs if variant_of(r) == modern_variant(args.base)]
            if not base:
                raise SelectionError(f"no runs of variant {args.base or '(the defaults)'} to score")
            if args.samples:
                part, variants = DECODER, sample_variants(args.samples)
                current, held = current_samples(base)
            else:
                part, variants = VIEW_WEIGHTING, view_weighting_variants(args.quantiles, args.powers)
                current = held = current_view_weighting(base)
            candidates, pooled = infer_candidates(base, current, variants, part), base
            setting = {
                name: ",".join(f"model.{part}.{k}={v}" for k, v in values.items())
                for name, values in [*variants.items(), (DEFAULT, held)]
            }
        rows = decide(candidates, args.criterion, args.higher, args.require_p)
        for r in rows:
            r["setting"] = setting.get(r["candidate"], "")
        write_decision(args.out, args.model, args.dataset, args.decision, rows, args.status, args.note)
    except (SelectionError, DuplicateRun, UnfinishedRun, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    warnings += [unshared_seeds(candidates), mixed_versions(pooled, f"the candidates of {args.decision}")]
    for w in filter(None, warnings):
        print(f"warning: {w}", file=sys.stderr)
    for r in rows:
        print(
            f"{'*' if r['chosen'] else ' '} {r['candidate']:48s} {args.criterion} {r['score']:.4f} "
            f"(diff {r['diff_vs_default']:+.4f}, p {r['p_vs_default']:.3g}, seeds {r['seeds']})"
        )
    return 0
