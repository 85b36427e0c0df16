"""python -m mnp.tools.report --paper: the comparison with the paper's numbers (accuracy, ECE, OOD AUROC and the
speed-up), which come from the package's data file (the tables themselves: tests/test_report.py)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from conftest import write_run
from test_report import MNP

from mnp.tools.report.report import report


def test_paper_comparison(sweep, tmp_path):
    report([sweep], tmp_path / "out", paper=True, plots=False)
    with open(tmp_path / "out" / "paper_comparison.csv") as f:
        rows = {(r["model"], r["dataset"], r["metric"]): r for r in csv.DictReader(f)}
    r = rows[("mnp", "pie", "test/acc")]
    assert float(r["paper"]) == pytest.approx(0.95) and float(r["diff"]) == pytest.approx(0.01)
    assert float(rows[("mgp", "cub", "test/ece")]["paper"]) == pytest.approx(0.038)
    md = (tmp_path / "out" / "results.md").read_text()
    assert f"| paper_main | {MNP} | PIE | test/acc | 96.00 | 95.00 | +1.00 |" in md
    assert re.search(r"\| paper_main \| MNP/MGP \| PIE \| speed-up train \| 0\.75 \| 2\.88 \| -2\.13 \|", md)


# ---------------------------------------------------------------------------- the paper's numbers
def test_paper_numbers_come_from_the_package_data_file():
    from importlib import resources

    import tomllib

    from mnp.tools.report.report_paper import PAPER_FILE, paper_rows, paper_speedups, paper_values

    printed = {(r["model"], r["dataset"], r["metric"]): r["value"] for r in paper_rows()}
    assert [printed[("mnp", "handwritten", k)] for k in ("test/acc", "test/ece", "noise/acc_mean")] == [
        "99.50",
        "0.005",
        "98.58",
    ]
    assert [printed[("mgp", "pie", k)] for k in ("test/acc", "test/ece", "noise/acc_mean")] == [
        "92.06",
        "0.079",
        "90.97",
    ]
    assert printed[("mnp", "cifar10c", "ood/svhn/auroc")] == "0.872"
    # in metrics.json units: accuracies as fractions, ECE and AUROC as printed
    values = paper_values()
    assert values[("mnp", "handwritten", "test/acc")] == pytest.approx(0.995)
    assert values[("mgp", "pie", "noise/acc_mean")] == pytest.approx(0.9097)
    assert values[("mgp", "pie", "test/ece")] == pytest.approx(0.079)
    assert values[("mnp", "cifar10c", "ood/svhn/auroc")] == pytest.approx(0.872)
    assert len(values) == 8 * 6 * 3 + 8 * 4  # Tables 1-3: 8 methods × 6 datasets; Table 4: 8 methods × 4
    assert paper_speedups()["pie"] == {"train": 2.88, "test": 5.37}
    # read through importlib.resources from inside the package, and declared as package data
    assert resources.files("mnp.tools.report").joinpath(PAPER_FILE).is_file()
    with open(Path(__file__).parents[1] / "pyproject.toml", "rb") as f:
        assert PAPER_FILE in tomllib.load(f)["tool"]["setuptools"]["package-data"]["mnp.tools.report"]


def test_paper_comparison_of_ood_and_speed_from_the_data_file(tmp_path):
    root = tmp_path / "logs"
    write_run(root, "paper_ood", "mnp", "cifar10c", 0, 0.75, 0.01, extra={"ood/svhn/auroc": 0.870})
    write_run(root, "paper_ood", "mgp", "cifar10c", 0, 0.73, 0.02, extra={"ood/svhn/auroc": 0.80})
    res = report([root], tmp_path / "out", paper=True, plots=False)
    md = (tmp_path / "out" / "results.md").read_text()
    section = md.split("## Comparison with the paper (docs/method.md §7)", 1)[1]
    assert f"| paper_ood | {MNP} | CIFAR10-C | ood/svhn/auroc | 0.870 | 0.872 | -0.002 |" in section
    assert f"| paper_ood | {MNP} | CIFAR10-C | test/acc | 75.00 | 74.92 | +0.08 |" in section
    assert "| paper_ood | MGP | CIFAR10-C | test/ece | 0.020 | 0.018 | +0.002 |" in section
    # times: mnp 1.0 s, mgp 1.0 s per epoch (seed 0) -> speed-up 1.00 against the paper's 1.17
    assert "| paper_ood | MNP/MGP | CIFAR10-C | speed-up train | 1.00 | 1.17 | -0.17 |" in section
    assert len(res["paper"]) == 2 * 3  # accuracy, ECE, AUROC SVHN per method
