"""python -m mnp.tools.report's jobs: failed, skipped, unreadable and interrupted jobs are listed and the report
goes on; --update replaces only the runs re-run; a missing directory, a foreign results.csv or an --out below a
file is one line (the tables themselves: tests/test_report.py)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from conftest import write_run
from test_report import read_csv

from mnp.tools.report.report import main, report


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


def test_missing_directory_is_an_error(tmp_path, capsys):
    assert main([str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 1
    assert "is not a directory" in capsys.readouterr().out


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


def test_jobs_the_filters_leave_out_are_not_listed(sweep, tmp_path, capsys):
    """A job still running at a seed outside ``--seeds`` (or another model than ``--models``) is not this report's:
    listing it as interrupted put a false job into results.md."""
    for model, seed in (("mcd", 11), ("mgp", 0), ("mcd", 0)):
        stopped = sweep / "paper_main" / "multiruns" / f"{model}_cub_s{seed}_stopped"
        stopped.mkdir(parents=True)
        (stopped / "config.yaml").write_text(f"seed: {seed}\nmodel:\n  name: {model}\ndataset:\n  name: cub\n")
    args = [str(sweep), "--out", str(tmp_path / "out"), "--no-plots", "--seeds", "0", "1", "--models", "mcd"]
    assert main(args) == 0
    assert "0 unreadable, 1 interrupted" in capsys.readouterr().out
    md = (tmp_path / "out" / "results.md").read_text()
    assert "## Interrupted jobs (1)" in md and "mcd / cub / seed 0:" in md and "seed 11" not in md


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
