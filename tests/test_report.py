"""python -m mnp.tools.report: tables (mean [95 % interval] (n), best bold, second underlined), CSV rows, failed/skipped
jobs, paper comparison and plots, from metrics files written here."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from mnp.tools.report.report import main, report
from mnp.tools.report.report_runs import Cell, load, model_label, summarise

MNP = model_label("mnp")

SIGMAS = [0.01, 0.1, 1.0, 10.0]


def write_run(
    root: Path,
    exp: str,
    model: str,
    dataset: str,
    seed: int,
    acc: float,
    ece: float,
    variant=None,
    extra: dict | None = None,
    predictions: bool = False,
) -> Path:
    d = root / exp / "multiruns" / f"{model}_{dataset}_{variant}_s{seed}"
    d.mkdir(parents=True)
    m = {
        "model": model,
        "dataset": dataset,
        "seed": seed,
        "epochs": 3,
        "experiment": exp,
        "test/acc": acc,
        "test/ece": ece,
        "noise/acc_mean": acc - 0.1,
        "time/train_epoch_s": 1.0 + seed,
        "time/test_s": 0.5,
    }
    m.update({f"noise/acc@{s:.4g}": acc - 0.01 * i for i, s in enumerate(SIGMAS)})
    m.update(extra or {})
    (d / "metrics.json").write_text(json.dumps(m))
    cfg = f"experiment_name: {exp}\nseed: {seed}\nmodel:\n  memory_size: 7\n"
    if variant is not None:
        cfg += f"variant: {variant}\n"
    (d / "config.yaml").write_text(cfg)
    if predictions:
        rng = np.random.default_rng(seed)
        probs = rng.dirichlet(np.ones(3), 60).astype(np.float32)
        np.savez(
            d / "predictions.npz",
            **{
                "test/probs": probs,
                "test/labels": rng.integers(0, 3, 60),
                "test/uncertainty": rng.random(60),
                "ood/svhn/uncertainty": np.r_[rng.random(60), 1 + rng.random(40)],
                "ood/svhn/is_ood": np.r_[np.zeros(60), np.ones(40)].astype(np.int64),
                "ood/svhn/probs": rng.dirichlet(np.ones(3), 100),
            },
        )
    return d


@pytest.fixture
def sweep(tmp_path):
    """paper_main-like runs: 3 models × 2 datasets; known accuracies per seed."""
    root = tmp_path / "logs"
    accs = {
        ("mnp", "pie"): [0.95, 0.96, 0.97],
        ("mgp", "pie"): [0.90, 0.92],
        ("mcd", "pie"): [0.92, 0.92, 0.92],
        ("mnp", "cub"): [0.80, 0.82],
        ("mgp", "cub"): [0.85, 0.87],
        ("mcd", "cub"): [0.70, 0.70],
    }
    eces = {
        ("mnp", "pie"): 0.04,
        ("mgp", "pie"): 0.08,
        ("mcd", "pie"): 0.02,
        ("mnp", "cub"): 0.05,
        ("mgp", "cub"): 0.03,
        ("mcd", "cub"): 0.20,
    }
    for (m, d), vals in accs.items():
        for s, a in enumerate(vals):
            write_run(root, "paper_main", m, d, s, a, eces[(m, d)], predictions=(d == "pie" and s < 2))
    return root


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


def test_failed_and_skipped_jobs_are_listed(sweep, tmp_path, capsys):
    d = sweep / "paper_main" / "multiruns" / "sngp_pie_s0"
    d.mkdir()
    (d / "failed.json").write_text(
        json.dumps(
            {
                "model": "sngp",
                "dataset": "pie",
                "seed": 0,
                "status": "failed",
                "error": "RuntimeError",
                "message": "CUDA out of memory",
            }
        )
    )
    d = sweep / "paper_main" / "multiruns" / "mnp_hmdb_s0"
    d.mkdir()
    (d / "skipped.json").write_text(
        json.dumps(
            {
                "model": "mnp",
                "dataset": "hmdb",
                "seed": 0,
                "status": "skipped",
                "reason": "HMDB51_HOG_MBH.mat not found in /data/hmdb/",
            }
        )
    )
    assert main([str(sweep), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "14 runs, 1 failed, 1 skipped" in out
    md = (tmp_path / "out" / "results.md").read_text()
    assert "## Failed jobs (1)" in md and "sngp / pie / seed 0: RuntimeError: CUDA out of memory" in md
    assert "## Skipped jobs (1)" in md and "HMDB51_HOG_MBH.mat not found" in md


def test_unreadable_records_are_listed_by_file_and_the_report_goes_on(sweep, tmp_path, capsys, caplog):
    """A truncated metrics.json used to fail the whole report with JSON's words and no file name; one holding
    a list was dropped without a word. Each is listed among the problem jobs (named by its config.yaml where
    there is one) with a warning naming the file, and the other runs are reported."""
    cut = write_run(sweep, "paper_main", "mnp", "pie", 3, 0.9, 0.05) / "metrics.json"
    cut.write_text(cut.read_text()[:40])
    listed = write_run(sweep, "paper_main", "mgp", "cub", 7, 0.9, 0.05) / "metrics.json"
    listed.write_text("[0.9, 0.05]")
    (listed.parent / "config.yaml").write_text("seed: 7\nmodel:\n  name: mgp\ndataset:\n  name: cub\n")
    bad_failed = sweep / "paper_main" / "multiruns" / "tmc_pie_s0"
    bad_failed.mkdir()
    (bad_failed / "failed.json").write_text('{"model": "tmc", "message": "CUDA out')
    assert main([str(sweep), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    assert "14 runs, 0 failed, 0 skipped, 3 unreadable" in capsys.readouterr().out
    md = (tmp_path / "out" / "results.md").read_text()
    assert "## Unreadable jobs (3)" in md
    assert (
        f"- mgp / cub / seed 7: metrics.json holds a JSON list, not a job's record (an object); re-run the job to "
        f"write it again ({listed.parent})"
    ) in md
    assert re.search(
        r"\n- metrics\.json cannot be read \(Unterminated string starting at: line 1 column \d+ \(char "
        rf"\d+\)\); re-run the job to write it again \({re.escape(str(cut.parent))}\)\n",
        md,
    )
    assert "- tmc / None / seed None: failed.json cannot be read (" not in md  # its identity is not trusted
    assert "failed.json cannot be read (" in md and f"({bad_failed})" in md
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(w.startswith(f"{cut} cannot be read (") for w in warned)
    assert f"{listed} holds a JSON list, not a job's record (an object); the job is left out of the tables" in warned
    rows = read_csv(tmp_path / "out" / "results.csv")  # the readable runs, as before
    assert rows[("mnp", "pie", "test/acc", "paper_main", "")]["n"] == "3"
    assert rows[("mgp", "cub", "test/acc", "paper_main", "")]["n"] == "2"


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


def test_missing_directory_is_an_error(tmp_path, capsys):
    assert main([str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 1
    assert "is not a directory" in capsys.readouterr().out


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


def test_update_replaces_only_the_runs_rerun(sweep, tmp_path):
    """--update: a re-run of seeds 0 and 1 of mnp on pie replaces those runs' rows of runs.csv (a metric they no
    longer report goes with them) and keeps seed 2 and every other group's rows and tables, without their run
    directories; results.csv is derived from the merged runs.csv."""
    out = tmp_path / "out"
    report([sweep], out, plots=False)
    before = read_csv(out / "results.csv")
    rerun = tmp_path / "rerun"
    for s, a in enumerate([0.5, 0.7]):
        write_run(rerun, "paper_main", "mnp", "pie", s, a, 0.01)
        metrics = rerun / "paper_main" / "multiruns" / f"mnp_pie_None_s{s}" / "metrics.json"
        m = json.loads(metrics.read_text())
        del m["time/test_s"]
        metrics.write_text(json.dumps(m))
    assert main([str(rerun), "--out", str(out), "--no-plots", "--update"]) == 0
    after = read_csv(out / "results.csv")
    r = after[("mnp", "pie", "test/acc", "paper_main", "")]
    assert float(r["mean"]) == pytest.approx((0.5 + 0.7 + 0.97) / 3) and r["n"] == "3"
    assert after[("mnp", "pie", "time/test_s", "paper_main", "")]["n"] == "1"  # seed 2's only
    assert {k: v for k, v in after.items() if k[:2] != ("mnp", "pie")} == {
        k: v for k, v in before.items() if k[:2] != ("mnp", "pie")
    }
    with open(out / "runs.csv") as f:
        runs = {(r["model"], r["dataset"], r["seed"]): r for r in csv.DictReader(f)}
    assert len(runs) == 14 and float(runs[("mnp", "pie", "0")]["test/acc"]) == 0.5
    assert runs[("mnp", "pie", "1")]["time/test_s"] == "" and runs[("mnp", "pie", "2")]["time/test_s"] == "0.5"
    md = (out / "results.md").read_text()
    assert "with the rows of 5 other groups kept" in md and "MGP" in md.split("## Experiment", 1)[1]


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


def test_interrupted_jobs_and_damaged_configs_are_listed_and_the_report_goes_on(sweep, tmp_path, capsys):
    """N61, N62, N20: one damaged or YAML-tagged config.yaml aborted the whole report with a traceback, and a job
    stopped before its metrics.json (its seed silently missing from the means) was not mentioned."""
    tagged = write_run(sweep, "paper_main", "mnp", "pie", 3, 0.9, 0.05)
    (tagged / "config.yaml").write_text('seed: !!python/object/apply:os.system ["touch PWNED_YAML"]\n')
    damaged = write_run(sweep, "paper_main", "mgp", "pie", 3, 0.9, 0.05)
    (damaged / "config.yaml").write_text("seed: [1, 2\n")
    stopped = sweep / "paper_main" / "multiruns" / "mcd_cub_s2"
    (stopped / "checkpoints").mkdir(parents=True)
    (stopped / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (stopped / "config.yaml").write_text("seed: 2\nmodel:\n  name: mcd\ndataset:\n  name: cub\n")
    (sweep / "paper_main" / "multiruns" / ".hydra-pending-999" / ".hydra").mkdir(parents=True)
    (sweep / "paper_main" / "multiruns" / ".hydra-pending-999" / ".hydra" / "config.yaml").write_text("seed: 0\n")
    assert main([str(sweep), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "14 runs, 0 failed, 0 skipped, 2 unreadable, 1 interrupted" in out
    assert not (Path.cwd() / "PWNED_YAML").exists()
    md = (tmp_path / "out" / "results.md").read_text()
    assert "## Interrupted jobs (1)" in md
    assert (
        f"- mcd / cub / seed 2: no metrics.json: the job stopped before it finished; its checkpoints/last.ckpt "
        f"is kept, re-run it to finish ({stopped})"
    ) in md
    assert "config.yaml cannot be read (" in md and f"({tagged})" in md and f"({damaged})" in md


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda out: (out / "results.csv").write_text("a,b\n1,2\n"), "it has no column 'experiment'"),
        (lambda out: (out / "results.csv").write_bytes(b"\xff\xfe\x00garbage"), "'utf-8' codec can't decode"),
    ],
)
def test_update_with_a_foreign_results_csv_or_an_out_below_a_file_is_one_line(sweep, tmp_path, capsys, make, says):
    """N64, N65: a NotADirectoryError traceback, a KeyError traceback, and a decode error naming no file."""
    out = tmp_path / "out"
    out.mkdir()
    make(out)
    assert main([str(sweep), "--out", str(out), "--no-plots", "--update"]) == 1
    assert capsys.readouterr().out.startswith(
        f"error: {out / 'results.csv'} is not a results.csv written by mnp.tools.report ({says}"
    )
    (tmp_path / "file").write_text("x")
    assert main([str(sweep), "--out", str(tmp_path / "file" / "sub"), "--no-plots"]) == 1
    assert capsys.readouterr().out == f"error: [Errno 20] Not a directory: '{tmp_path / 'file' / 'sub'}'\n"


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
