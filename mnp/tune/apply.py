"""Turn a finished tuning study into its committed record and the config that makes its winner the default.

    python -m mnp.tune.apply logs/tune/sngp_cub [--results results/tuning] [--conf conf/tuned]

writes ``results/tuning/sngp_cub.csv`` (the study's every trial, its seed check, its declaration and the chosen
one) and ``conf/tuned/sngp_cub.yaml`` (the winner's settings; ``conf/train.yaml`` loads it after the per-dataset
files). A study short of its budget, or whose seed check is unfinished, is refused. A study of your own data
(``dataset=custom``) prints the winner's overrides instead: one config would serve every file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from datamodules.files import atomic_write
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


def apply(sweep_dir: Path, results: Path, conf: Path) -> list[Path]:
    record, text = finished_study(sweep_dir)
    name, model, dataset = record["study"], record["model"], record["dataset"]
    if model in UNTUNED:
        raise ValueError(f"{model} is the authors' configuration and stays untuned")
    out = results / f"{name}.csv"
    results.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda tmp: Path(tmp).write_text(text))
    if dataset == "custom":
        print(f"the winner's settings (give them to train.py): {' '.join(record['overrides'])}")
        return [out]
    how = "seed check " if str(record.get("chosen_by", "")).startswith("seed check") else ""
    body = tuned_config(
        record["overrides"], f"{out.as_posix()} (trial {record['trial']}, {how}mean {record['mean']:.4g})"
    )
    cfg = conf / f"{name}.yaml"
    conf.mkdir(parents=True, exist_ok=True)
    atomic_write(cfg, lambda tmp: Path(tmp).write_text(body))
    return [out, cfg]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m mnp.tune.apply", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_dir", type=Path, help="a study's directory, logs/tune/<model>_<dataset>")
    p.add_argument("--results", type=Path, default=Path("results/tuning"), help="where the record goes")
    p.add_argument("--conf", type=Path, default=Path("conf/tuned"), help="where the generated config goes")
    args = p.parse_args(argv)
    try:
        for path in apply(args.sweep_dir, args.results, args.conf):
            print(f"wrote {path}")
    except (ValueError, OSError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
