"""Cells whose seeds all gave the same value are marked ‡ with a sentence saying so, in the docs and the report."""

from mnp.tools.docgen.docgen_results import ZERO_WIDTH, ci_cell, with_notes
from mnp.tools.report.report_runs import Cell, summarise
from mnp.tools.report.report_tables import ACC, ZERO_WIDTH_NOTE, Table, table_md, table_tex


def test_a_zero_width_interval_is_marked_and_explained_in_the_docs():
    same = {"mean": 0.98, "std": 0.0, "n": 10, "ci": (0.98, 0.98), "source": "runs"}
    spread = {**same, "std": 0.01, "ci": (0.97, 0.99)}
    assert ci_cell(same, 100, 2) == "98.00 [98.00, 98.00]‡ (10)"
    assert ci_cell(spread, 100, 2) == "98.00 [97.00, 99.00] (10)"
    assert with_notes(f"| a |\n| {ci_cell(same, 100, 2)} |").splitlines()[-2:] == ["", ZERO_WIDTH]
    assert ZERO_WIDTH not in with_notes(f"| {ci_cell(spread, 100, 2)} |")


def test_a_zero_width_interval_is_marked_in_the_report_tables():
    same, spread = summarise([0.98] * 10), summarise([0.97, 0.99, 0.98])
    assert same.std < 1e-15 and same.ci[1] - same.ci[0] < 1e-15
    table = Table("1", "Test accuracy", "acc", [("tmc", None), ("mgp", None)], [("PIE", "pie", ACC)],
                  {(0, 0): same, (1, 0): spread})  # fmt: skip
    md = table_md(table, 1)
    assert f"; ‡ {ZERO_WIDTH_NOTE})" in md.splitlines()[0]
    assert "| TMC | **98.00 [98.00, 98.00]‡** (10) |" in md and "| MGP | **98.00 [95.52, 100.48]** (3) |" in md
    assert r"$^\ddagger$" in table_tex(table, "paper_main")
    one_seed = Table("1", "t", "acc", [("tmc", None)], [("PIE", "pie", ACC)], {(0, 0): Cell(0.98, float("nan"), 1)})
    assert "‡" not in table_md(one_seed, 1)
