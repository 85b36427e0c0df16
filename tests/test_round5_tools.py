"""Round five of the reliability issue, part B5 and B6: the selection protocol (``mnp.tools.select``), the report
(``mnp.tools.report``) and ``mnp.tools.docgen --check`` on damaged inputs (docs/reliability.md, "Round five:
selection, report and docgen"). Each test builds its runs in tmp_path."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess

import pytest
from cfg_utils import ROOT
from conftest import write_run
from test_report import md_table, read_csv
from test_selection import _fake_run, _sweep

from mnp.runs import codeversion
from mnp.tools.docgen import docgen
from mnp.tools.docgen.docgen_sources import ADVICE
from mnp.tools.report.report import main as report_main
from mnp.tools.select import select

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

    from mnp.cli.pipeline import train

    train(compose_train(tmp_path, ["model=mlp", "trainer.max_epochs=1", "dataset.num_views=2"]))
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert {k: record[k] for k in ("code/commit", "code/dirty")} == codeversion.code_version()
    assert len(record["code/commit"]) == 40


# ---------------------------------------------------------------------------- B6: report
def _base(tmp_path):
    """Two models, two seeds each, on PIE; the runs' root."""
    root = tmp_path / "logs"
    for model, accs in {"mcd": [0.80, 0.82], "etp": [0.70, 0.72]}.items():
        for seed, acc in enumerate(accs):
            write_run(root, "base", model, "pie", seed, acc, 0.05)
    return root


def _report(tmp_path, capsys, root, out=None) -> tuple[int, list[str]]:
    capsys.readouterr()
    rc = report_main([str(root), "--out", str(out or tmp_path / "out"), "--no-plots"])
    return rc, capsys.readouterr().out.strip().splitlines()


def _run_dir(root, model: str, seed: int):
    return root / "base" / "multiruns" / f"{model}_pie_None_s{seed}"


@pytest.mark.parametrize(
    "text, why",
    [
        ("NaN", "is nan, not a finite number"),  # R02
        ("Infinity", "is inf, not a finite number"),  # R03
        ('"0.9"', 'is "0.9", not a number'),  # R03
        ("1.7", "is 1.7, outside [0, 1]"),  # R06
        ("-0.2", "is -0.2, outside [0, 1]"),  # R06
    ],
)
def test_a_void_accuracy_shows_its_cell_void_with_a_line_naming_run_and_key(tmp_path, capsys, text, why):
    """R02, R03, R06: the cell is ``void`` in the table and results.csv, never averaged over the other seed."""
    root = _base(tmp_path)
    path = _run_dir(root, "mcd", 1) / "metrics.json"
    path.write_text(re.sub(r'"test/acc": [0-9.]+', f'"test/acc": {text}', path.read_text()))
    rc, out = _report(tmp_path, capsys, root)
    line = f"{path}: test/acc {why}; its cell is void"
    assert rc == 0 and out[1:] == [f"  note: {line}"]
    md = (tmp_path / "out" / "results.md").read_text()
    assert md_table(md, "1") == {"MCD": ["void"], "ETP": ["**71.00 [58.29, 83.71]** (2)"]}
    assert f"## Notes (1)\n\n- {line}\n" in md
    cell = read_csv(tmp_path / "out" / "results.csv")[("mcd", "pie", "test/acc", "base", "")]
    assert (cell["source"], cell["mean"], cell["n"]) == ("void", "nan", "2")


def test_a_negative_ece_is_void_and_its_claim_untested(tmp_path, capsys):
    root = _base(tmp_path)
    write_run(root, "base", "mnp", "pie", 0, 0.9, -0.01)
    rc, out = _report(tmp_path, capsys, root)
    assert rc == 0 and out[1:] == [
        f"  note: {_run_dir(root, 'mnp', 0) / 'metrics.json'}: test/ece is -0.01, outside [0, 1]; its cell is void"
    ]
    claim = {(r["baseline"], r["metric"]): r for r in csv.DictReader((tmp_path / "out" / "claims.csv").open())}
    assert claim[("mcd", "test/ece")]["verdict"] == "untested (void value)" and claim[("mcd", "test/acc")]["difference"]


def test_report_refuses_a_doctored_copy_of_a_run_and_writes_nothing(tmp_path, capsys):
    """R04: a copy of the MCD run with another accuracy: one line naming both files, no output folder."""
    root = _base(tmp_path)
    copy = root / "base" / "multiruns" / "mcd_copy"
    shutil.copytree(_run_dir(root, "mcd", 0), copy)
    _metrics(copy, **{"test/acc": 0.99})
    rc, out = _report(tmp_path, capsys, root)
    assert rc == 1 and out == [
        f"error: two different records of mcd / pie / seed 0 (experiment base): {copy / 'metrics.json'} and "
        f"{_run_dir(root, 'mcd', 0) / 'metrics.json'}; move the one that is not the run's away and run again"
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("inside", ["", "sub/dir"])
def test_report_refuses_an_out_in_a_run_directory(tmp_path, capsys, inside):
    """R09: as evaluate.py refuses an output_dir that holds a training run; the run's folder is left as it was."""
    root = _base(tmp_path)
    run = _run_dir(root, "mcd", 0)
    (run / "checkpoints").mkdir()
    before = sorted(p.name for p in run.rglob("*"))
    rc, out = _report(tmp_path, capsys, root, out=run / inside)
    assert rc == 1 and out == [
        f"error: --out {run / inside} is {'inside ' if inside else ''}the run directory {run} (config.yaml, "
        "metrics.json, checkpoints/), which a report never writes into; choose another --out"
    ]
    assert sorted(p.name for p in run.rglob("*")) == before


def test_a_seed_that_is_not_an_integer_lists_that_run_unreadable_and_reports_the_others(tmp_path, capsys):
    """R11."""
    root = _base(tmp_path)
    _metrics(_run_dir(root, "mcd", 0), seed="zero")
    rc, out = _report(tmp_path, capsys, root)
    assert rc == 0 and out[0].startswith("3 runs, 0 failed, 0 skipped, 1 unreadable, 0 interrupted")
    assert out[1] == (
        "  unreadable: metrics.json holds seed 'zero', not an integer; re-run the job to write it again "
        f"({_run_dir(root, 'mcd', 0)})"
    )
    assert md_table((tmp_path / "out" / "results.md").read_text(), "1")["MCD"] == ["**82.00** (n = 1)"]


def test_validation_runs_are_left_out_of_the_test_tables_with_a_line(tmp_path, capsys):
    """MIX: the selection's runs (eval.split=val) hold only val/ metrics and times: no "Test time" table of them."""
    root = _base(tmp_path)
    _fake_run(
        root / "select" / "multiruns", "default", 0, {"val/acc": 0.5, "time/test_s": 0.1, "time/train_epoch_s": 1}
    )
    rc, out = _report(tmp_path, capsys, root)
    assert rc == 0 and out[1:] == [
        "  note: 1 runs evaluated on validation rows (eval.split=val, experiment select) left out: they have no "
        "test metrics; python -m mnp.tools.select reads their val/ metrics"
    ]
    md = (tmp_path / "out" / "results.md").read_text()
    assert "## Experiment `select`" not in md and "## Experiment `base`" in md
    assert "select" not in (tmp_path / "out" / "runs.csv").read_text()


def test_report_says_when_a_cells_runs_come_from_different_commits(tmp_path, capsys):
    """S11: the seeds of one cell from two code versions."""
    root = _base(tmp_path)
    _metrics(_run_dir(root, "mcd", 1), **{"code/commit": "c" * 40, "code/dirty": False})
    rc, out = _report(tmp_path, capsys, root)
    assert rc == 0 and out[1:] == [
        f"  note: MCD on pie (experiment base) pool runs of 2 code versions: {'c' * 10} (1 runs, e.g. "
        f"{_run_dir(root, 'mcd', 1)}); unrecorded (1 runs, e.g. {_run_dir(root, 'mcd', 0)})"
    ]


# ---------------------------------------------------------------------------- B6: docgen --check
@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A copy of what docgen reads and writes (README.md, docs/, results/, benchmarks/, figures/, conf/), which
    docgen then takes for the project."""
    root = tmp_path / "repo"
    for name in ("docs", "results", "benchmarks", "figures", "conf"):
        shutil.copytree(ROOT / name, root / name)
    shutil.copy(ROOT / "README.md", root / "README.md")
    monkeypatch.setattr(docgen, "ROOT", root)
    return root


def _docgen_error(capsys, *args: str) -> str:
    """docgen's one ``error:`` line on stderr, and its exit status 1."""
    capsys.readouterr()
    assert docgen.main(list(args)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _rewrite_csv(path, edit) -> None:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(edit(rows))


def test_docgen_names_a_runs_csv_cut_mid_row(tree, capsys):
    """D02."""
    runs = tree / "results" / "paper_main" / "runs.csv"
    lines = runs.read_text().splitlines()
    runs.write_text("\n".join(lines[:10]) + "\n" + lines[10].split(",")[0])
    assert _docgen_error(capsys, "--check") == (
        f"error: {runs} is not a runs.csv written by mnp.tools.report (line 11 has fewer fields than its header); "
        f"{ADVICE}"
    )


def test_docgen_names_a_runs_csv_whose_seed_is_not_a_number(tree, capsys):
    """D09."""
    runs = tree / "results" / "paper_main" / "runs.csv"
    _rewrite_csv(runs, lambda rows: [rows[0], rows[1], [*rows[2][:4], "abc", *rows[2][5:]], *rows[3:]])
    assert _docgen_error(capsys, "--check") == (
        f"error: {runs} is not a runs.csv written by mnp.tools.report (line 3: invalid literal for int() with base "
        f"10: 'abc'); {ADVICE}"
    )


def test_docgen_names_a_decision_record_of_binary_garbage(tree, capsys):
    """D04."""
    record = tree / "results" / "decisions" / "mnp_cub.csv"
    record.write_bytes(b"\xff\xfe\x00" + bytes(range(256)))
    assert _docgen_error(capsys, "--check") == (
        f"error: {record} cannot be read ('utf-8' codec can't decode byte 0xff in position 0: invalid start byte); "
        f"{ADVICE}"
    )


def test_docgen_gives_its_own_advice_for_a_results_csv_without_its_mean_column(tree, capsys):
    """D05: not the report's "leave out --update"."""
    results = tree / "results" / "paper_main" / "results.csv"
    _rewrite_csv(results, lambda rows: [r[:3] + r[4:] for r in rows])
    assert _docgen_error(capsys, "--check") == (
        f"error: {results} is not a results.csv written by mnp.tools.report (it has no column 'mean'); {ADVICE}"
    )


def test_docgen_names_a_deleted_goals_csv(tree, capsys):
    """D06."""
    (tree / "docs" / "goals.csv").unlink()
    assert _docgen_error(capsys, "--check") == (
        f"error: {tree / 'docs' / 'goals.csv'} cannot be read (No such file or directory); {ADVICE}"
    )


def test_docgen_check_fails_on_an_unterminated_block(tree, capsys):
    """D07: an opening line without its closing one is malformed, not skipped as up to date."""
    readme = tree / "README.md"
    n = len(readme.read_text().splitlines())
    readme.write_text(readme.read_text() + "\n<!-- generated:glance -->\nstale\n")
    assert _docgen_error(capsys, "--check") == (
        f"error: README.md, line {n + 2}: <!-- generated:glance --> has no <!-- /generated:glance --> after it; "
        "end the block with that line"
    )


@pytest.mark.slow
def test_docgen_refuses_a_block_of_no_renderer_and_writes_no_file(tree, capsys):
    """D08: also without --check, no doc file is written, not even the stale ones before the bad block."""
    readme, last = tree / "README.md", docgen.doc_files(tree)[-1]
    readme.write_text(readme.read_text().replace("<!-- generated:glance -->\n", "<!-- generated:glance -->\nstale\n"))
    last.write_text(last.read_text() + "\n<!-- generated:nosuch -->\nx\n<!-- /generated:nosuch -->\n")
    before = {p: p.read_text() for p in docgen.doc_files(tree)}
    name = last.relative_to(tree).as_posix()
    assert _docgen_error(capsys).startswith(f"error: {name}: unknown generated block 'nosuch'; known: goals, ")
    assert {p: p.read_text() for p in docgen.doc_files(tree)} == before
