"""benchmarks/research/training_divergence.py (ETP's CUB collapse, docs/results.md): on written metrics logs it
finds the first epoch whose training accuracy falls below half the best so far, with its global step, and only
once the run had trained; the committed summaries agree with their own runs."""

from __future__ import annotations

import csv
import json
import sys

import pytest
from cfg_utils import ROOT

sys.path.insert(0, str(ROOT / "benchmarks" / "research"))
from training_divergence import main  # noqa: E402


def write_run(path, accs, steps_per_epoch=3, kl=None):
    """A run directory whose csv/metrics.csv has one training row per epoch (and a test row Lightning adds)."""
    (path / "csv").mkdir(parents=True)
    with open(path / "csv" / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["epoch", "step", "train/acc", "train/loss", "train/kl", "test/acc"])
        w.writeheader()
        for e, a in enumerate(accs):
            k = "" if kl is None else kl[e]
            w.writerow(
                {"epoch": e, "step": (e + 1) * steps_per_epoch - 1, "train/acc": a, "train/loss": 1 - a, "train/kl": k}
            )
        w.writerow({"epoch": len(accs) - 1, "step": len(accs) * steps_per_epoch - 1, "test/acc": 0.5})
    (path / "metrics.json").write_text(json.dumps({"test/acc": 0.5}))
    return path


def test_the_first_epoch_below_half_the_best_after_training(tmp_path):
    # run a: early noise under 0.9 does not count; it reaches 0.95, then 0.5 (not below half), then 0.4 at epoch 5
    a = write_run(tmp_path / "a", [0.1, 0.05, 0.95, 0.9, 0.5, 0.4, 0.9], kl=[70, 70, 70, 71, 900, 5000, 80])
    b = write_run(tmp_path / "b", [0.2, 0.6, 0.85, 0.3], steps_per_epoch=2)  # never passes 0.9: not diverged
    c = write_run(tmp_path / "c", [0.5, 0.96, 0.97, 0.97], steps_per_epoch=2)
    out = tmp_path / "out.json"
    main([str(a), str(b), str(c), "--out", str(out)])
    doc = json.loads(out.read_text())
    runs = {r["run"]: r for r in doc["runs"]}
    assert runs["a"]["diverged_at"] == {"epoch": 5, "step": 17}
    assert [e["epoch"] for e in runs["a"]["around"]] == [2, 3, 4, 5, 6]
    assert runs["a"]["kl_peak"] == 5000 and runs["a"]["steps"] == 21 and runs["a"]["final"] == {"test/acc": 0.5}
    assert runs["b"]["diverged_at"] is None and runs["c"]["diverged_at"] is None
    assert doc["diverged"] == 1 and doc["runs_n"] == 3
    assert doc["first_divergence_step"] == 17 and doc["most_steps_without"] == 8


def test_a_run_without_a_metrics_log_is_named_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match=r"error: no csv/metrics.csv in .*empty"):
        main([str(tmp_path / "empty")])


@pytest.mark.parametrize(
    "name", ["etp_cub_divergence.json", "etp_cub_divergence_folds.json", "etp_cub_divergence_steps.json"]
)
def test_the_committed_summaries_agree_with_their_runs(name):
    doc = json.loads((ROOT / "benchmarks" / name).read_text())
    diverged = [r for r in doc["runs"] if r["diverged_at"]]
    assert doc["diverged"] == len(diverged) and doc["runs_n"] == len(doc["runs"])
    if diverged:
        assert doc["first_divergence_step"] == min(r["diverged_at"]["step"] for r in diverged)
        assert all(r["final"]["test/acc"] < 0.25 for r in diverged)  # each collapse ends near chance (10 classes)
    steps = [r["steps"] for r in doc["runs"] if not r["diverged_at"]]
    assert doc["most_steps_without"] == max(steps)
