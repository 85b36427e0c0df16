"""The docs: generated blocks match the committed result files (each renderer: tests/test_docs_renderers.py),
committed results are derived from their runs, links and the tests docs/reliability.md names resolve, nothing
outside the repository is cited, the slow marker counts its tests, the README stays a guide."""

import re
from pathlib import Path

import pytest

from mnp.tools.docgen import docgen

ROOT = Path(__file__).resolve().parents[1]


def test_generated_blocks_match_the_committed_result_files():
    src = docgen.sources()
    for path in docgen.doc_files():
        text = path.read_text()
        assert docgen.render_file(text, src) == text, f"{path.name} is out of date: run python -m mnp.tools.docgen"


def test_committed_results_are_derived_from_their_runs():
    """Each committed results.csv is what its runs.csv gives, plus legacy cells; without runs.csv it holds
    legacy cells only (none may claim a source it lacks)."""
    from mnp.tools.report.report_records import derive, read_runs
    from mnp.tools.report.report_runs import LEGACY, read_cells

    for d in sorted((ROOT / "results").iterdir()):
        if not (d / "results.csv").is_file():
            continue
        cells = read_cells(d / "results.csv")
        if (d / "runs.csv").is_file():
            assert derive(read_runs(d / "runs.csv"), cells) == cells, d.name
        else:
            assert {c.source for c in cells.values()} == {LEGACY}, d.name


def test_every_link_in_the_docs_resolves():
    for path in docgen.doc_files():
        for target in re.findall(r"\]\(([^)#]+)\)", path.read_text()):
            if not target.startswith("http"):
                assert (path.parent / target).exists(), f"{path.name} links to missing {target}"


def test_every_test_the_reliability_promises_name_exists():
    """docs/reliability.md names the test holding each promise (and each round-four case): a renamed or deleted
    test would leave a promise unheld without a word."""
    import ast

    named = set(re.findall(r"tests/(\w+\.py)::(\w+)", (ROOT / "docs" / "reliability.md").read_text()))
    assert len(named) > 60
    missing = []
    for file, name in sorted(named):
        path = ROOT / "tests" / file
        tree = ast.parse(path.read_text()) if path.is_file() else ast.Module(body=[])
        if name not in {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}:
            missing.append(f"{file}::{name}")
    assert missing == []


def test_docs_cite_nothing_outside_the_repository():
    for path in docgen.doc_files():
        text = path.read_text()
        assert not re.search(r"SPEC §|PITFALLS\.md|SOURCES\.md|issue #\d", text), path.name


def test_code_and_configs_cite_nothing_outside_the_repository():
    """A comment that cites a file the repository lacks (PITFALLS.md) says the reason itself instead."""
    files = [
        p
        for d in ("mnp", "baselines", "datamodules", "conf", "benchmarks")
        for p in (ROOT / d).rglob("*")
        if p.suffix in (".py", ".yaml")
    ] + [ROOT / "train.py", ROOT / "evaluate.py"]
    cited = [p.relative_to(ROOT).as_posix() for p in files if re.search(r"PITFALLS\.md|SPEC §", p.read_text())]
    assert cited == []


@pytest.mark.slow
def test_the_slow_marker_says_how_many_tests_it_marks():
    import subprocess
    import sys

    import tomllib

    text = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"][0]
    said = re.match(r"slow: (\d+) tests", text)
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", "-p", "no:warnings"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    marked = re.search(r"^(\d+)/\d+ tests collected", res.stdout, re.M)
    assert said and marked and int(said.group(1)) == int(marked.group(1)), (text, res.stdout[-500:])


def test_readme_is_a_user_guide():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 12_500
    for heading in (
        "## Set up and run",
        "## Tests",
        "## Commands",
        "## Datasets and models",
        "## Your own data",
        "## Sweeps, results and wandb",
        "## Results at a glance",
    ):
        assert heading in text
    assert 'pip install -e ".[optuna]"' in text and 'pip install -e ".[test]" && MNP_DATA_DIR' in text
