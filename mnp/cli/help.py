"""``python train.py --help`` and ``python evaluate.py --help``: what the command does, examples, and the
choices, read from the config folders (fast: no Hydra composition, no torch import).
Hydra's own help stays available as ``--hydra-help``."""

from __future__ import annotations

from pathlib import Path

CONF = Path(__file__).resolve().parents[2] / "conf"

TRAIN = """\
train.py: train one model on one dataset, test it (accuracy, ECE, NLL, accuracy under noisy views, OOD
AUROC where the dataset has OOD sets) and write metrics.json, predictions.npz, config.yaml, checkpoints
and logs to one run directory, whose path and summary are printed at the end.

usage: python train.py [key=value ...]          one run
       python train.py -m [key=v1,v2 ...]        a sweep (one run per combination)

Examples:
  python train.py model=mnp dataset=handwritten                    the main job (about 2 min on 2 CPU cores)
  python train.py -m model=mnp,mgp dataset=pie seed=0,1,2 launcher=joblib   a sweep, 2 jobs at a time
  python train.py dataset=custom dataset.path=my_views.npz         your own data (x1..xM, y[, train_idx, test_idx])
  python train.py model=mnp dataset=cub logger=wandb               log to wandb (offline unless WANDB_MODE=online)
  python train.py model=mnp dataset=pie                            run it again: resumes from last.ckpt, or skips if done
  python train.py -m experiment=paper_main                         the paper's Tables 1-3 (8 models x 6 datasets x 5 seeds)
  python train.py experiment=quick model=mgp dataset=pie           a quick try of any model on any dataset (< 1 min)

Common keys: seed=0  trainer.max_epochs=N  trainer=gpu  dataset.batch_size=200  ckpt_path=last|null|<file>
             paths.log_dir=logs  eval.noise_levels=[0.1,1]  eval.noise_max_subsets=64 (noised view subsets,
             drawn from eval.noise_seed where there are more)  model.<switch>=<value> (docs/switches.md)
Model keys and the values they accept (model.optim.clip_norm > 0 or null, model.loss.l2 >= 0, model.optim.lr > 0, ...):
             docs/usage.md, "Model keys and the values they accept"
"""

EVALUATE = """\
evaluate.py: rebuild a finished run from its checkpoint alone and re-run the whole evaluation
(clean, noisy and OOD); writes metrics.json and predictions.npz to <run dir>/eval.

usage: python evaluate.py ckpt_path=<run dir>/checkpoints/last.ckpt [data_dir=<dir>] [output_dir=<dir>]

Examples:
  python evaluate.py ckpt_path=logs/default/runs/mnp_pie_s0/checkpoints/last.ckpt
  python evaluate.py ckpt_path=/abs/path/last.ckpt data_dir=/data/mnp        data moved to another directory
  python evaluate.py ckpt_path=last.ckpt +eval.noise_levels=[0.5,1,2]          another noise protocol (+eval.<key>)
  python evaluate.py ckpt_path=last.ckpt +model.decoder.eval_samples=20        MNP's inference-only settings (+model.<key>)
"""


def choices(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def train_help() -> str:
    lists = [
        ("models", "model"),
        ("datasets", "dataset"),
        ("experiments", "experiment"),
        ("loggers", "logger"),
        ("launchers", "launcher"),
        ("trainers", "trainer"),
    ]
    body = "\n".join(f"{title + ':':<13}{', '.join(choices(group))}" for title, group in lists)
    return f"{TRAIN}\n{body}\n\nHydra's own help: python train.py --hydra-help\n"


def evaluate_help() -> str:
    return f"{EVALUATE}\nHydra's own help: python evaluate.py --hydra-help\n"


def wants_help(argv: list[str]) -> bool:
    return any(a in ("--help", "-h") for a in argv)
