"""Round five of the reliability issue, part B5 and B6: the selection protocol (``mnp.tools.select``), the report
(``mnp.tools.report``) and ``mnp.tools.docgen --check`` on damaged inputs (docs/reliability.md, "Round five:
selection, report and docgen"). Each test builds its runs in tmp_path."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess

import pytest

from cfg_utils import ROOT
from mnp.core import codeversion
from mnp.tools import select
from test_selection import _sweep

CANDIDATE = "model.memory.size=300"


def _decide(tmp_path, capsys, *extra: str, out=None) -> tuple[int, list[str]]:
    """``select decide`` of the memory-size candidates under tmp_path: its status and its stderr lines."""
    out = out or tmp_path / "d.csv"
    capsys.readouterr()
    args = ["decide", str(tmp_path / "runs"), "--model", "mnp", "--dataset", "cub", "--decision", "memory_size"]
    rc = select.main([*args, "--match", "memory.size", "--out", str(out), *extra])
    return rc, capsys.readouterr().err.strip().splitlines()


def _three_seeds(tmp_path):
    _sweep(tmp_path / "runs", {"default": [0.50, 0.52, 0.47], CANDIDATE: [0.60, 0.58, 0.61]})
    return tmp_path / "runs"


def _metrics(run_dir, **changes) -> None:
    path = run_dir / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


# ---------------------------------------------------------------------------- B5: select
def test_a_doctored_copy_of_a_candidates_seed_is_refused_naming_both_files(tmp_path, capsys):
    """S04: two different records of one (candidate, seed) are refused, whichever is newer; nothing is written."""
    runs = _three_seeds(tmp_path)
    original = runs / f"{CANDIDATE}_s0"
    shutil.copytree(original, runs / "copy_of_s0")
    _metrics(runs / "copy_of_s0", **{"val/nll": 0.1})  # newer, and better than every default seed
    rc, err = _decide(tmp_path, capsys)
    assert rc == 2 and err == [
        f"error: two different records of mnp / cub / seed 0 (experiment select, variant {CANDIDATE}): "
        f"{runs / 'copy_of_s0' / 'metrics.json'} and {original / 'metrics.json'}; move the one that is not the "
        "run's away and run again"
    ]
    assert not (tmp_path / "d.csv").exists()


def test_an_exact_copy_of_a_run_counts_once(tmp_path, capsys):
    runs = _three_seeds(tmp_path)
    shutil.copytree(runs / f"{CANDIDATE}_s0", runs / "copy_of_s0")
    rc, _ = _decide(tmp_path, capsys)
    rows = list(csv.DictReader((tmp_path / "d.csv").open()))
    assert rc == 0 and [r["seeds"] for r in rows] == ["0 1 2", "0 1 2"]


def test_an_unfinished_candidate_seed_is_named_and_the_decision_reads_the_shared_seeds(tmp_path, capsys):
    """S05: the interrupted seed-2 run (config.yaml, no metrics.json) is named, and so are the seeds left out."""
    runs = _three_seeds(tmp_path)
    (runs / f"{CANDIDATE}_s2" / "metrics.json").unlink()
    rc, err = _decide(tmp_path, capsys)
    assert rc == 0
    assert err == [
        "warning: interrupted job left out: no metrics.json: the job stopped before it finished; re-run it to "
        f"finish ({runs / f'{CANDIDATE}_s2'})",
        f"warning: {CANDIDATE} has no finished run of seed 2: decided on seeds 0 1 only, those every candidate "
        "finished",
    ]
    assert {r["seeds"] for r in csv.DictReader((tmp_path / "d.csv").open())} == {"0 1"}


def test_out_a_directory_is_one_line(tmp_path, capsys):
    """S08."""
    _three_seeds(tmp_path)
    (tmp_path / "d.csv").mkdir()
    rc, err = _decide(tmp_path, capsys)
    assert rc == 2 and err == [
        f"error: --out {tmp_path / 'd.csv'} is a directory; give the decision record's .csv file"
    ]


def test_an_empty_directory_says_no_runs_were_found(tmp_path, capsys):
    """S10."""
    (tmp_path / "runs").mkdir()
    rc, err = _decide(tmp_path, capsys)
    assert rc == 2 and err == [f"error: no runs of mnp on cub in {tmp_path / 'runs'}"]
    assert not (tmp_path / "d.csv").exists()


def test_a_seed_that_is_not_an_integer_leaves_that_run_out_named(tmp_path, capsys):
    """S15: ``"seed": "zero"`` makes that run unreadable, named by its file; the decision goes on without it."""
    runs = _three_seeds(tmp_path)
    _metrics(runs / f"{CANDIDATE}_s0", seed="zero")
    rc, err = _decide(tmp_path, capsys)
    assert rc == 0
    assert err[0] == (
        f"warning: unreadable job left out: metrics.json holds seed 'zero', not an integer; re-run the job to write "
        f"it again ({runs / f'{CANDIDATE}_s0'})"
    )
    assert {r["seeds"] for r in csv.DictReader((tmp_path / "d.csv").open())} == {"1 2"}


def test_select_says_when_the_candidates_runs_come_from_different_commits(tmp_path, capsys):
    """S11: the runs pooled are named by code version (``code/commit`` of metrics.json, +dirty)."""
    runs = _three_seeds(tmp_path)
    for d in runs.iterdir():
        _metrics(d, **{"code/commit": "a" * 40, "code/dirty": False})
    _metrics(runs / f"{CANDIDATE}_s1", **{"code/commit": "b" * 40, "code/dirty": True})
    rc, err = _decide(tmp_path, capsys)
    assert rc == 0 and err == [
        f"warning: the candidates of memory_size pool runs of 2 code versions: {'a' * 10} (5 runs, e.g. "
        f"{runs / 'default_s0'}); {'b' * 10}+dirty (1 runs, e.g. {runs / f'{CANDIDATE}_s1'})"
    ]
    for d in runs.iterdir():
        _metrics(d, **{"code/commit": "b" * 40, "code/dirty": True})
    assert _decide(tmp_path, capsys) == (0, [])  # one version: nothing said


def test_a_run_records_the_commit_of_its_code_and_none_outside_a_checkout(tmp_path, monkeypatch):
    """S11: metrics.json's code version is the checkout's HEAD and whether tracked files differ from it."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True
    )
    assert codeversion.code_version() == {"code/commit": head.strip(), "code/dirty": bool(dirty.stdout)}
    codeversion.code_version.cache_clear()
    monkeypatch.setattr(codeversion, "ROOT", tmp_path)  # a copy of the project outside any git checkout
    try:
        assert codeversion.code_version() == {"code/commit": None, "code/dirty": None}
    finally:
        codeversion.code_version.cache_clear()


@pytest.mark.slow
def test_a_trained_run_writes_its_code_version_into_metrics_json(tmp_path, one_thread):
    from cfg_utils import compose_train
    from mnp.core.pipeline import train

    train(compose_train(tmp_path, ["model=mlp", "trainer.max_epochs=1", "dataset.num_views=2"]))
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert {k: record[k] for k in ("code/commit", "code/dirty")} == codeversion.code_version()
    assert len(record["code/commit"]) == 40
