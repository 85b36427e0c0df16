"""Figure 2 (two moons): three attention variants, PNG + JSON summary, and the figure's claim."""

import json

import pytest

from mnp.tools.figures import figure2


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


@pytest.mark.slow  # matplotlib's first figure
def test_each_row_of_figure2_shares_one_colour_scale_across_its_columns(tmp_path):
    import numpy as np

    n = len(figure2.mesh())
    rng = np.random.default_rng(0)
    results = {
        name: {
            "p1": rng.uniform(0, 1, n),
            "unc": rng.uniform(0, top, n),
            "attn": np.linspace(0, top / 10, 5),
            "ctx": rng.normal(size=(5, 2)),
            "acc": 0.9,
            "attended": 5,
        }
        for name, top in (("a", 0.2), ("b", 0.7))
    }
    drawn = figure2.draw(results, rng.normal(size=(10, 2)), rng.integers(0, 2, 10), tmp_path / "f.png")
    unc_top = max(float(r["unc"].max()) for r in results.values())
    assert [m.get_clim() for m in drawn["unc"]] == [(0.0, unc_top)] * 2  # not each column's own 0.2 and 0.7
    assert [m.get_clim() for m in drawn["attn"]] == [(0.0, pytest.approx(0.07))] * 2
    assert [m.get_clim() for m in drawn["p1"]] == [(0.0, 1.0)] * 2
