"""mnp.tools.docgen.differences: the gap records, TMC's probability readings, and the docs section rendered from them."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from mnp.tools.docgen import differences
from mnp.tools.docgen.differences_gaps import Context, Gap
from mnp.tools.docgen.docgen_differences import render_differences
from mnp.tools.report.report_runs import model_label

ROOT = Path(__file__).resolve().parents[1]


def _tmc_module():
    spec = importlib.util.spec_from_file_location(
        "tmc_probabilities", ROOT / "benchmarks/research/tmc_probabilities.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_gap_records_are_what_the_command_writes_from_the_committed_files():
    committed = differences.read(ROOT / differences.OUT)
    assert committed == [{k: str(v) for k, v in r.items()} for r in differences.rows(differences.context(ROOT))]
    pie_tmc = next(r for r in committed if (r["dataset"], r["model"], r["metric"]) == ("pie", "tmc", "test/ece"))
    assert (pie_tmc["paper"], pie_tmc["ours"]) == ("0.072", "0.724")


def test_each_tmc_reading_from_the_stored_mean_and_uncertainty():
    alpha = np.array([[3.0, 1.0, 1.0], [1.0, 2.0, 5.0]])  # S = 5 and 8
    s = alpha.sum(-1, keepdims=True)
    got = _tmc_module().readings((alpha / s).astype(np.float32), (3 / s[:, 0]).astype(np.float32))
    e = alpha - 1
    np.testing.assert_allclose(got["dirichlet_mean"], [[0.6, 0.2, 0.2], [0.125, 0.25, 0.625]], rtol=1e-6)
    np.testing.assert_allclose(got["belief"], [[0.4, 0, 0], [0, 0.125, 0.5]], atol=1e-6)
    np.testing.assert_allclose(got["belief_normalised"], [[1, 0, 0], [0, 0.2, 0.8]], atol=1e-6)
    np.testing.assert_allclose(got["softmax_evidence"], np.exp(e) / np.exp(e).sum(-1, keepdims=True), rtol=1e-5)


def test_a_gap_whose_evidence_gives_an_unknown_status_is_refused(monkeypatch):
    ctx = Context(paper={}, ours={}, runs={}, earlier={}, tmc={}, flips={}, bench={})
    bad = Gap("pie", "mnp", "test/acc", "h", "cmd", lambda c, g: ("measured", "solved"))
    monkeypatch.setattr(differences, "GAPS", [bad])
    with pytest.raises(ValueError, match="gap pie/mnp/test/acc: status 'solved' is not one of"):
        differences.rows(ctx)


def test_the_section_lists_each_gap_and_each_cause_once():
    row = dict(dataset="pie", model="tmc", metric="test/ece", paper="0.072", ours="0.724", ci95_low="0.721",
               ci95_high="0.727", n="10", hypothesis="H", experiment="cmd", outcome="O", status="explained")  # fmt: skip
    text = render_differences({"differences": [row, {**row, "dataset": "cub"}]})
    assert "| PIE | TMC | ECE | 0.072 | 0.724 [0.721, 0.727] (10) | explained |" in text.splitlines()
    assert (
        text.splitlines()[-1]
        == "- **PIE TMC ECE; CUB TMC ECE** (explained). Hypothesis: H. Experiment: `cmd`. Measured: O."
    )
    assert model_label("mnp_official") == "MNP (authors' code)"
    assert render_differences({"differences": []}).startswith("No records")


def test_mgps_budget_gap_takes_the_larger_closure_of_the_authors_steps_and_the_tuned_defaults():
    from scipy import stats

    from mnp.tools.docgen.differences_gaps import mgp_budget

    row = lambda e, v, acc: {(e, "mgp", "cub", v, s): {"test/acc": a} for s, a in enumerate(acc)}  # noqa: E731
    ctx = Context(
        paper={("mgp", "cub", "test/acc"): 0.92},
        ours={},
        runs=row("paper_main", None, [0.88, 0.89, 0.90]),
        earlier={},
        tmc={},
        flips={"mgp_cub_full": row("mgp_cub_full", "trainer.max_epochs=133", [0.88, 0.89, 0.90])},
        bench={},
    )
    gap = Gap("cub", "mgp", "test/acc", "h", "cmd", mgp_budget)
    text, status = mgp_budget(ctx, gap)
    assert status == "not explained" and "0% of the gap" in text and text.endswith("ruled out: the budget and the "
                                                                                   "tuned settings, on these seeds")  # fmt: skip
    ctx.tuned = row("paper_tuned", None, [0.905, 0.91, 0.915])  # from 89 % to 91 %: 2 of the 3 points
    text, status = mgp_budget(ctx, gap)
    p = stats.ttest_ind([0.905, 0.91, 0.915], [0.88, 0.89, 0.90], equal_var=False).pvalue
    assert status == "partly explained" and f"91.00 % over 3 seeds against 89.00 % (Welch p = {p:.2g}), 67% of" in text


def test_mgps_handwritten_ece_reads_its_re_runs_and_the_calibrated_models_floor():
    from mnp.tools.docgen.differences_gaps import mgp_hw_ece

    def rows(variant, ece, floor=None):
        return {
            ("paper_main", "mgp", "handwritten", variant, s): {
                "test/ece": e,
                **({"test/ece_floor": floor} if floor else {}),
            }
            for s, e in enumerate(ece)
        }

    cell = [0.014, 0.024, 0.013]
    ctx = Context(paper={("mgp", "handwritten", "test/ece"): 0.006}, ours={}, runs=rows(None, cell), earlier={},
                  tmc={}, flips={}, bench={})  # fmt: skip
    gap = Gap("handwritten", "mgp", "test/ece", "h", "cmd", mgp_hw_ece)
    assert mgp_hw_ece(ctx, gap)[1] == "not explained"  # not re-run
    ctx.flips = {"mgp_handwritten_weights": {**rows(None, cell, floor=0.004), **rows("uniform", [0.07, 0.06, 0.08])}}
    text, status = mgp_hw_ece(ctx, gap)
    assert status == "not explained"  # a floor under the paper's ECE explains nothing
    assert "0.017, the cell's ECE on every seed" in text and "uniform: 0.070 against 0.017" in text
    assert "farther from the paper" in text
    ctx.flips["mgp_handwritten_weights"].update(rows(None, cell, floor=0.013))
    text, status = mgp_hw_ece(ctx, gap)
    assert status == "partly explained" and "scores ECE 0.013 on these 400 test rows" in text
