"""The docs: generated tables match the committed result files, links resolve, the README stays a guide."""
import re
from pathlib import Path

from mnp.tools import docgen

ROOT = Path(__file__).resolve().parents[1]


def test_generated_blocks_match_the_committed_result_files():
    src = docgen.sources()
    for path in docgen.doc_files():
        text = path.read_text()
        assert docgen.render_file(text, src) == text, f"{path.name} is out of date: run python -m mnp.tools.docgen"


def test_renderers_read_the_numbers_from_the_files(tmp_path):
    csv = tmp_path / "results" / "paper_main" / "results.csv"
    csv.parent.mkdir(parents=True)
    rows = ["model,dataset,metric,mean,std,n,experiment,variant"]
    rows += [f"mnp,pie,{k},{v},0.01,3,paper_main," for k, v in (("test/acc", 0.9512), ("test/ece", 0.0301),
                                                                  ("noise/acc_mean", 0.9011))]
    rows += [f"mgp,pie,{k},{v},0.0,3,paper_main," for k, v in (("test/acc", 0.9), ("test/ece", 0.02),
                                                                 ("noise/acc_mean", 0.91))]
    csv.write_text("\n".join(rows) + "\n")
    src = {"paper_main": docgen.read_results(csv)}
    assert "| PIE | `mnp` | 95.12 ± 1.00 | 0.030 ± 0.010 | 90.11 ± 1.00 | 3 |" in docgen.render_paper_main(src)
    goals = docgen.render_goals(src)
    assert "| PIE | acc % | ≥ 94.5 | 95.12 | 3 | met |" in goals
    assert "| PIE | noisy acc % | ≥ 92.5 | 90.11 | 3 | missed by 2.39 |" in goals
    beats = docgen.render_beats(src)
    assert "- PIE: noisy accuracy does not hold (90.11 vs MGP 91.00); ECE does not hold (0.030 vs MGP 0.020)" in beats


def test_every_link_in_the_docs_resolves():
    for path in docgen.doc_files():
        for target in re.findall(r"\]\(([^)#]+)\)", path.read_text()):
            if not target.startswith("http"):
                assert (path.parent / target).exists(), f"{path.name} links to missing {target}"


def test_docs_cite_nothing_outside_the_repository():
    for path in docgen.doc_files():
        text = path.read_text()
        assert not re.search(r"SPEC §|PITFALLS\.md|SOURCES\.md|issue #\d", text), path.name


def test_readme_is_a_user_guide():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 12_500
    for heading in ("## Set up and run", "## Tests", "## Commands", "## Datasets and models", "## Your own data",
                    "## Sweeps, results and wandb", "## Results at a glance"):
        assert heading in text
    assert "pip install -e \".[test,optuna]\"" in text and "python -m pytest -q" in text
