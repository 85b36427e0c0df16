"""Figure 2 command: three attention variants, PNG + JSON summary."""
import json

from mnp import figure2


def test_figure2_writes_png_and_summary(tmp_path):
    summary = figure2.main(["--out", str(tmp_path), "--epochs", "1"])
    assert set(summary) == set(figure2.VARIANTS)
    assert (tmp_path / "figure2.png").stat().st_size > 10_000
    on_disk = json.loads((tmp_path / "figure2.json").read_text())
    for name, row in on_disk.items():
        assert 0.5 <= row["acc"] <= 1.0  # two moons are learnable in one epoch well beyond chance
        assert 1 <= row["attended"] <= 100  # sparsemax/softmax weights over N^m = 100 context points
