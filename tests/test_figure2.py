"""Figure 2 (two moons): three attention variants, PNG + JSON summary, and the figure's claim."""

import json

import pytest

from mnp.tools import figure2


@pytest.mark.slow
def test_figure2_rbf_attention_is_more_uncertain_than_dot_product_at_the_ood_point(tmp_path):
    summary = figure2.main(["--out", str(tmp_path)])  # the synthetic config's own 10 epochs
    assert set(summary) == set(figure2.VARIANTS)
    assert (tmp_path / "figure2.png").stat().st_size > 10_000
    rows = json.loads((tmp_path / "figure2.json").read_text())
    dot, rbf, rbf_l = rows["dot product"], rows["RBF without L_RBF"], rows["RBF with L_RBF"]
    for row in rows.values():
        assert row["acc"] >= 0.85  # every variant learns the moons
        assert 1 <= row["attended"] <= 100  # sparsemax weights over N^m = 100 context points
    # the paper's point: dot-product attention is confidently wrong far from the data, RBF is not
    assert rbf["unc_ood"] > dot["unc_ood"] and rbf_l["unc_ood"] > dot["unc_ood"]
    assert rbf["unc_ood"] > rbf["unc_id"] and dot["unc_ood"] < dot["unc_id"]
