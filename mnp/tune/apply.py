"""Turn a finished tuning study into its committed record and the config that makes its winner the default.

    python -m mnp.tune.apply logs/tune/sngp_cub [--results results/tuning] [--conf conf/tuned] [--inference CSV]

writes ``results/tuning/sngp_cub.csv`` (the study's every trial, its seed check, its declaration and the chosen
one) and ``conf/tuned/sngp_cub.yaml`` (the winner's settings; ``conf/train.yaml`` loads it after the per-dataset
files). A study short of its budget, or whose seed check is unfinished, is refused. A study of your own data
(``dataset=custom``) prints the winner's overrides instead: one config would serve every file.

MNP's inference-only settings (eq. 8′'s q and p, the decoder's S at prediction) are no part of the study: they are
chosen afterwards on validation rows, on checkpoints of the winner (``mnp.tools.select infer``, e.g.
``benchmarks/selection/cub.sh tuned``). ``--inference results/decisions/mnp_cub_tuned.csv`` adds that record's
chosen settings to the generated config.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from datamodules.files import atomic_write
from mnp.model.inference_settings import inference_settings
from mnp.tune.records import read_trials, tuned_config, unchecked

UNTUNED = ("mnp_official",)  # the authors' configuration stays theirs


def finished_study(sweep_dir: Path) -> tuple[dict, str]:
    """The study's best.yaml and trials.csv text; a study short of its budget or of its seed check is refused."""
    trials, best = sweep_dir / "trials.csv", sweep_dir / "best.yaml"
    if not trials.is_file() or not best.is_file():
        raise ValueError(f"{sweep_dir} holds no finished study (trials.csv and best.yaml): run experiment=tune first")
    text = trials.read_text()
    _, done, budget = read_trials(text)
    if budget is None or len(done) < budget:
        need = budget if budget is not None else "?"
        raise ValueError(
            f"{sweep_dir}: {len(done)} of {need} trials finished; re-run the study's command to complete it"
        )
    record = yaml.safe_load(best.read_text())
    why = unchecked(record)
    if why:
        command = [o for o in str(record.get("fixed", "")).split() if not o.startswith("dataset.cv_folds=")]
        raise ValueError(
            f"{sweep_dir}: its seed check is not finished ({why}); finish it with: python train.py -m {' '.join(command)}"
        )
    return record, text


def inference_choices(record: Path, model: str, dataset: str) -> list[str]:
    """The chosen settings of a decision record made on the winner's checkpoints, as overrides; a decision of
    another pair, one not chosen, or a setting that needs training is refused in one line."""
    with open(record, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["chosen"] == "True"]
    if not rows:
        raise ValueError(f"{record} chose nothing: run its decisions first (mnp.tools.select infer)")
    out: list[str] = []
    for r in rows:
        if (r["model"], r["dataset"]) != (model, dataset):
            raise ValueError(f"{record} decides {r['model']} on {r['dataset']}, not the study's {model} on {dataset}")
        settings = [o for o in r["setting"].split(",") if o]
        parsed = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(settings)}
        if not all(k.startswith("model.") for k in parsed):
            raise ValueError(f"{record}, decision {r['decision']}: {r['setting']} is not a model setting")
        inference_settings({k.removeprefix("model."): v for k, v in parsed.items()})  # refuses a trained setting
        out += settings
    return out


def apply(sweep_dir: Path, results: Path, conf: Path, inference: Path | None = None) -> list[Path]:
    record, text = finished_study(sweep_dir)
    name, model, dataset = record["study"], record["model"], record["dataset"]
    if model in UNTUNED:
        raise ValueError(f"{model} is the authors' configuration and stays untuned")
    chosen = inference_choices(inference, model, dataset) if inference is not None else []  # before any write
    out = results / f"{name}.csv"
    results.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda tmp: Path(tmp).write_text(text))
    if dataset == "custom":
        print(f"the winner's settings (give them to train.py): {' '.join(record['overrides'] + chosen)}")
        return [out]
    how = "seed check " if str(record.get("chosen_by", "")).startswith("seed check") else ""
    source = f"{out.as_posix()} (trial {record['trial']}, {how}mean {record['mean']:.4g})"
    if inference is not None:
        source += f"; inference: {inference.as_posix()}"
    body = tuned_config(list(record["overrides"]) + chosen, source)
    cfg = conf / f"{name}.yaml"
    conf.mkdir(parents=True, exist_ok=True)
    atomic_write(cfg, lambda tmp: Path(tmp).write_text(body))
    return [out, cfg]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mnp.tune.apply", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_dir", type=Path, help="a study's directory, logs/tune/<model>_<dataset>")
    p.add_argument("--results", type=Path, default=Path("results/tuning"), help="where the record goes")
    p.add_argument("--conf", type=Path, default=Path("conf/tuned"), help="where the generated config goes")
    p.add_argument(
        "--inference", type=Path, help="MNP: a decision record of inference-only settings on the winner's checkpoints"
    )
    args = p.parse_args(argv)
    try:
        for path in apply(args.sweep_dir, args.results, args.conf, args.inference):
            print(f"wrote {path}")
    except (ValueError, OSError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
