"""python -m mnp.tools.report: tables (mean [95 % interval] (n), best bold, second underlined), CSV rows, variants,
OOD and selective columns, custom files, table numbers and plots, from metrics files written here (conftest's
``write_run`` and ``sweep``). Failed, skipped, unreadable or interrupted jobs and --update:
tests/test_report_jobs.py; the paper comparison: tests/test_report_paper.py."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import write_run

from mnp.tools.report.report import main, report
from mnp.tools.report.report_runs import Cell, load, model_label, summarise

MNP = model_label("mnp")


def read_csv(path: Path) -> dict[tuple, dict]:
    with open(path) as f:
        return {(r["model"], r["dataset"], r["metric"], r["experiment"], r["variant"]): r for r in csv.DictReader(f)}


def md_table(md: str, number: str) -> dict[str, list[str]]:
    """Rows of the markdown table 'Table <number>.' as {method: [cells]}."""
    block = md.split(f"**Table {number}.**", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in block.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def test_summarise_mean_sample_std_and_n():
    c = summarise([0.95, 0.96, 0.97])
    assert c.n == 3 and c.mean == pytest.approx(0.96) and c.std == pytest.approx(0.01)
    assert summarise([0.5]) == Cell(0.5, 0.0, 1)


def test_csv_rows_are_mean_std_n_per_model_dataset_metric(sweep, tmp_path):
    report([sweep], tmp_path / "out", plots=False)
    rows = read_csv(tmp_path / "out" / "results.csv")
    r = rows[("mnp", "pie", "test/acc", "paper_main", "")]
    assert float(r["mean"]) == pytest.approx(0.96) and float(r["std"]) == pytest.approx(0.01) and r["n"] == "3"
    r = rows[("mgp", "pie", "test/acc", "paper_main", "")]
    assert float(r["mean"]) == pytest.approx(0.91) and float(r["std"]) == pytest.approx(np.std([0.9, 0.92], ddof=1))
    assert r["n"] == "2"
    assert float(rows[("mgp", "pie", "time/train_epoch_s", "paper_main", "")]["mean"]) == pytest.approx(1.5)
    assert ("mnp", "pie", "seed", "paper_main", "") not in rows
    # one row per model × dataset × metric: 6 cells × (3 accuracy/ECE + 4 noise levels + 2 times)
    assert len(rows) == 6 * 9
    with open(tmp_path / "out" / "results.csv") as f:
        assert f.readline().strip().startswith("model,dataset,metric,mean,std,n")


def test_tables_show_percentages_intervals_best_bold_second_underlined(sweep, tmp_path):
    report([sweep], tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "results.md").read_text()
    acc = md_table(md, "1")
    assert list(acc) == ["MCD", "MGP", MNP]  # paper order
    pie, cub = 1, 0  # columns in paper order: CUB, PIE
    assert acc[MNP][pie] == "**96.00 [93.52, 98.48]** (3)"  # mean ± t(0.975, 2)·0.01/√3
    assert acc["MCD"][pie] == "<u>92.00 [92.00, 92.00]‡</u> (3)"  # every seed the same: marked
    assert acc["MGP"][pie] == "91.00 [78.29, 103.71] (2)"  # t(0.975, 1) = 12.71: wide
    assert acc["MGP"][cub].startswith("**86.00") and acc[MNP][cub].startswith("<u>81.00")
    ece = md_table(md, "2")  # lower is better
    assert ece["MCD"][pie].startswith("**0.020") and ece[MNP][pie].startswith("<u>0.040")
    assert ece["MGP"][cub].startswith("**0.030") and ece[MNP][cub].startswith("<u>0.050")
    assert md_table(md, "3")[MNP][pie].startswith("**86.00")  # noise/acc_mean = acc − 0.1
    t5 = md_table(
        md, "4"
    )  # no OOD table: training time is Table 4; min is best; mcd and mnp tie on pie (seeds 0..2 -> mean 2.0)
    assert t5["MGP"][pie].startswith("**1.500") and t5[MNP][pie].startswith("<u>2.000")
    assert t5["MCD"][pie].startswith("<u>2.000")
    tex = (tmp_path / "out" / "results.tex").read_text()
    assert r"\textbf{96.00\,[93.52, 98.48]}\,{\scriptsize(3)}" in tex
    assert r"\underline{92.00\,[92.00, 92.00]$^\ddagger$}" in tex
    speed = md_table(md, "6")  # MGP time / MNP time per dataset
    assert speed["PIE"] == ["0.75", "1.00"]


def test_ties_share_the_rank():
    from mnp.tools.report.report_tables import ACC, Table

    t = Table(
        "1",
        "t",
        "t",
        [("a", None), ("b", None), ("c", None)],
        [("D", "d", ACC)],
        {(0, 0): Cell(0.9925, 0, 5), (1, 0): Cell(0.9925, 0, 5), (2, 0): Cell(0.995, 0, 5)},
    )
    assert t.ranks() == {(2, 0): 1, (0, 0): 2, (1, 0): 2}


def test_variants_duplicates_and_evaluate_outputs(tmp_path):
    root = tmp_path / "logs"
    for v, accs in {"mse": [0.9, 0.92], "fifo": [0.8, 0.82]}.items():
        for s, a in enumerate(accs):
            write_run(root, "ablation_context", "mnp", "pie", s, a, 0.05, variant=v)
    # the same job found twice (a copied folder, the same record): counted once; a different record is refused
    # (tests/test_round5_tools.py)
    write_run(root / "copy", "ablation_context", "mnp", "pie", 0, 0.9, 0.05, variant="mse")
    # evaluate.py output (has a checkpoint key) is not a sweep job
    ev = write_run(
        root, "ablation_context", "mnp", "pie", 5, 0.0, 0.5, variant="mse", extra={"checkpoint": "x/last.ckpt"}
    )
    assert ev.exists()
    runs, jobs = load([root])
    assert len(runs) == 4 and not jobs
    report([root], tmp_path / "out", plots=False)
    acc = md_table((tmp_path / "out" / "results.md").read_text(), "1")
    assert acc == {
        f"{MNP} (fifo)": ["<u>81.00 [68.29, 93.71]</u> (2)"],
        f"{MNP} (mse)": ["**91.00 [78.29, 103.71]** (2)"],
    }
    rows = read_csv(tmp_path / "out" / "results.csv")
    assert float(rows[("mnp", "pie", "test/acc", "ablation_context", "mse")]["mean"]) == pytest.approx(0.91)
    # with evaluations=True the evaluate.py output counts as its run re-scored: it replaces seed 0 of "mse"
    rescored = write_run(
        root / "eval", "ablation_context", "mnp", "pie", 0, 0.5, 0.05, variant="mse", extra={"checkpoint": "c"}
    )
    runs, _ = load([root], evaluations=True)
    mse = {r.seed: r.metrics["test/acc"] for r in runs if r.variant == "mse"}
    assert mse == {0: 0.5, 1: 0.92, 5: 0.0} and len(runs) == 5 and rescored.exists()


def test_ood_table_columns_in_paper_order(tmp_path):
    root = tmp_path / "logs"
    for m, (svhn, c100) in {"mnp": (0.87, 0.79), "mgp": (0.80, 0.75), "mcd": (0.79, 0.72)}.items():
        write_run(
            root, "paper_ood", m, "cifar10c", 0, 0.75, 0.01, extra={"ood/svhn/auroc": svhn, "ood/cifar100/auroc": c100}
        )
    report([root], tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| Method | Accuracy (%) ↑ | ECE ↓ | AUROC SVHN ↑ | AUROC CIFAR100 ↑ |" in md
    t4 = md_table(md, "4")
    assert t4[MNP][2:] == ["**0.870** (n = 1)", "**0.790** (n = 1)"]  # one seed: no spread shown
    assert t4["MGP"][2:] == ["<u>0.800</u> (n = 1)", "<u>0.750</u> (n = 1)"]
    assert t4["MCD"][2] == "0.790 (n = 1)"


def test_selective_and_ood_detection_columns(tmp_path):
    """AURC, accuracy at 90 % coverage and adaptive ECE in a table of their own; AUPR and FPR95 beside AUROC."""
    root = tmp_path / "logs"
    for m, (aurc, fpr) in {"mnp": (0.02, 0.30), "mgp": (0.05, 0.60)}.items():
        write_run(
            root,
            "paper_ood",
            m,
            "cifar10c",
            0,
            0.75,
            0.01,
            extra={
                "test/aurc": aurc,
                "test/acc@cov90": 0.8,
                "test/ece_adaptive": 0.03,
                "ood/svhn/auroc": 0.9,
                "ood/svhn/aupr": 0.85,
                "ood/svhn/fpr95": fpr,
            },
        )
    report([root], tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| Method | Accuracy (%) ↑ | ECE ↓ | AUROC SVHN ↑ | AUPR SVHN ↑ | FPR95 SVHN ↓ |" in md
    assert md_table(md, "4")[MNP][4] == "**0.300** (n = 1)"  # lower is better
    selective = md_table(md, "5")
    assert "not in the paper" in md.split("**Table 5.**", 1)[1].split("\n", 1)[0]
    assert selective[MNP] == ["**0.0200** (n = 1)", "**80.00** (n = 1)", "**0.030** (n = 1)"]
    assert selective["MGP"][0] == "<u>0.0500</u> (n = 1)"
    assert "not in the paper" in (tmp_path / "out" / "results.tex").read_text()


@pytest.mark.slow
def test_plots(sweep, tmp_path):
    # a context-size sweep: numeric variants
    for n, acc in [(20, 0.8), (50, 0.85), (100, 0.9)]:
        for s in range(2):
            write_run(sweep, "context_size", "mnp", "pie", s, acc + 0.01 * s, 0.05, variant=n)
    res = report([sweep], tmp_path / "out", plots=True)
    names = sorted(p.name for p in res["plots"])
    assert names == [
        "context_size_context_pie.png",
        "context_size_noise_pie.png",
        "context_size_speed.png",
        "paper_main_noise_cub.png",
        "paper_main_noise_pie.png",
        "paper_main_ood_pie_svhn.png",
        "paper_main_reliability_pie.png",
        "paper_main_speed.png",
    ]
    for p in res["plots"]:
        assert p.stat().st_size > 5000 and p.read_bytes()[:4] == b"\x89PNG"
    assert "plots/paper_main_reliability_pie.png" in (tmp_path / "out" / "results.md").read_text()


# ---------------------------------------------------------------------------- table numbers
def test_tables_numbered_consecutively_with_the_paper_table_named(sweep, tmp_path):
    # paper_main has no OOD sets (no paper Table 4); paper_ood has one dataset with OOD sets
    for m, svhn in {"mnp": 0.87, "mgp": 0.80}.items():
        write_run(sweep, "paper_ood", m, "cifar10c", 0, 0.75, 0.01, extra={"ood/svhn/auroc": svhn})
    report([sweep], tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "results.md").read_text()
    heads = re.findall(r"^\*\*Table (\S+)\.\*\* .*\(cf\. paper Table (\d)", md, flags=re.M)
    assert [n for n, _ in heads] == [str(i) for i in range(1, 14)]  # no gap, no 5a, no number twice
    main_part, ood_part = md.split("## Experiment `paper_ood`")
    assert [p for n, p in heads if f"**Table {n}.**" in main_part] == ["1", "2", "3", "5", "5", "5"]
    assert [p for n, p in heads if f"**Table {n}.**" in ood_part] == ["1", "2", "3", "4", "5", "5", "5"]
    assert "Training time per epoch" in md.split("**Table 4.**")[1].split("\n")[0]
    assert "AUROC SVHN" in md.split("**Table 10.**")[1].split("**Table 11.**")[0]
    tex = (tmp_path / "out" / "results.tex").read_text()
    assert tex.count(r"\caption{") == 13
    assert re.findall(r"cf\.\\ paper Table (\d)", tex) == [p for _, p in heads]


def test_custom_runs_are_grouped_by_their_file_one_seed_shows_no_spread_and_the_report_stays_beside_them(
    tmp_path, capsys
):
    """Runs on two custom files get a column each (their best marks compare runs on one file); a single seed is
    shown as its value and "(n = 1)", not "[…] (1)"; without --out the report goes to <first dir>/report."""
    root = tmp_path / "logs"
    for stem, accs in {"wine": {"mnp": 0.90, "mlp": 0.95}, "iris": {"mnp": 0.97, "mlp": 0.93}}.items():
        for model, acc in accs.items():
            d = write_run(root / stem, "default", model, "custom", 0, acc, 0.05)
            with open(d / "config.yaml", "a") as f:
                f.write(f"dataset:\n  name: custom\n  path: /data/{stem}.npz\n")
    assert main([str(root), "--no-plots"]) == 0
    assert f"-> {root / 'report' / 'results.md'}" in capsys.readouterr().out
    md = (root / "report" / "results.md").read_text()
    assert "| Method | iris | wine |" in md and "Custom" not in md and "[" not in md_table(md, "1")[MNP][0]
    assert md_table(md, "1") == {
        "MLP": ["<u>93.00</u> (n = 1)", "**95.00** (n = 1)"],
        MNP: ["**97.00** (n = 1)", "<u>90.00</u> (n = 1)"],
    }
    assert r"\textbf{97.00}\,{\scriptsize($n = 1$)}" in (root / "report" / "results.tex").read_text()


def test_speed_up_only_between_cells_of_the_same_kind_of_record():
    """MGP time / MNP time per dataset; a legacy cell against per-run records (another machine, another load) is left out."""
    from mnp.tools.report.report_runs import LEGACY
    from mnp.tools.report.report_tables import speedups

    key = "time/train_epoch_s"
    agg = {
        ("e", "mnp", None, "cub", key): Cell(2.0, 0, 10),
        ("e", "mgp", None, "cub", key): Cell(9.0, 0, 10),
        ("e", "mnp", None, "pie", key): Cell(1.0, 0, 10),
        ("e", "mgp", None, "pie", key): Cell(9.0, 0, 5, None, LEGACY),
    }
    assert speedups(agg, "e") == {"cub": {"train": 4.5}}
