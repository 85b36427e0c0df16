"""The speed benchmark (mnp.tools.bench): a tiny end-to-end run (JSON shape, positive numbers), the FLOP
counter against analytic counts, the live-tensor memory tracker against known allocations."""

import json
import math

import pytest
import torch
from mnp_utils import flat_mnp

from mnp.tools.bench import bench, bench_cases, bench_measure, bench_scaling

FIELDS = (
    "dataset",
    "model",
    "train_epoch_s",
    "test_s",
    "test_samples_per_s",
    "peak_mem_mb",
    "train_gflops_per_s",
    "test_gflops_per_s",
    "matmul_peak_gflops_per_s",
)
RATIOS = ("mgp_over_mnp_train", "mgp_over_mnp_test", "mnp_over_mlp_train", "mnp_over_mlp_test")


pytestmark = pytest.mark.usefixtures("one_thread")  # restores the thread count bench.run sets


@pytest.mark.slow
def test_quick_run_on_a_tiny_shape_writes_the_documented_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(bench_cases.SHAPES, "hmdb", ((6, 4), 3, 500))  # hmdb's configs, tiny data
    out = tmp_path / "bench.json"
    result = bench.main(
        [
            "--quick",
            "--dataset",
            "hmdb",
            "--json",
            str(out),
            "--set",
            "mnp.encoder.d_e=16",
            "--set",
            "mnp.memory.size=12",
            "--set",
            "mgp.num_inducing=8",
            "--set",
            "mgp.mc_samples=10",
        ]
    )
    saved = json.loads(out.read_text())
    assert saved["cases"] == json.loads(json.dumps(result["cases"]))
    assert [c["model"] for c in saved["cases"]] == ["mnp", "mgp", "mlp"]
    for c in saved["cases"]:
        assert c["dataset"] == "hmdb"
        for f in FIELDS[2:]:
            assert isinstance(c[f], float) and math.isfinite(c[f]) and c[f] > 0, (c["model"], f)
        assert c["train_batches_full"] == 2 and c["train_batches_timed"] == 1 and c["extrapolated"]
        assert c["test_rows_full"] == 100 and c["test_rows_timed"] == 100
    assert set(saved["ratios"]["hmdb"]) == set(RATIOS) | {"mgp_over_mnp_test_context_reused"}
    assert (
        saved["cases"][0]["test_s_context_reused"] > 0
    )  # a timing, measured (how it compares: benchmarks, not a test)
    assert all(v > 0 for v in saved["ratios"]["hmdb"].values())
    assert saved["meta"]["threads"] == 1
    text = capsys.readouterr().out
    assert "torch.set_num_threads(1)" in text and "| hmdb* | mnp |" in text and "MGP/MNP train" in text


def test_flop_counter_gives_the_analytic_count_of_a_matmul_and_its_weight_gradient():
    m, k, n = 7, 11, 13
    a, b = torch.randn(m, k), torch.randn(k, n)
    assert bench_measure.count_flops(lambda: a @ b) == 2 * m * k * n
    w = torch.randn(k, n, requires_grad=True)
    assert bench_measure.count_flops(lambda: (a @ w).sum().backward()) == 2 * (2 * m * k * n)  # forward + weight grad


def test_live_tensor_bytes_sees_allocations_and_frees():
    def work():
        a = torch.empty(1000, 1000)  # 4 MB
        b = a + 1  # 8 MB alive
        del a
        c = b * 2  # a is gone: still 8 MB
        return c.sum()  # + 4 bytes

    mode = bench_measure.LiveTensorBytes(torch.device("cpu"))
    with mode:
        work()
    assert mode.peak == 8_000_004
    state = torch.nn.Linear(1000, 250)  # 1 MB of parameters counted from the start
    assert bench_measure.tracked_peak_mb(work, torch.device("cpu"), state) == (8_000_004 + 1_001_000) / 2**20


def test_mlp_floor_has_mnp_projection_and_decoder_widths():
    mnp = flat_mnp(num_classes=5, view_dims=[7, 3], d_e=32, projection="linear", memory_size=10)
    floor = bench_cases.MLPFloor(5, [7, 3], d_e=32)
    assert [p[0].weight.shape for p in floor.projections] == [e.projection[0].weight.shape for e in mnp.encoders]
    assert [p.shape for p in floor.decoder.parameters()] == [p.shape for p in mnp.decoder.parameters()]
    probs, unc = floor.predict([torch.randn(4, 7), torch.randn(4, 3)])
    assert probs.shape == (1, 4, 5) and torch.allclose(probs.sum(-1), torch.ones(1, 4)) and unc.shape == (4,)


def test_linear_fit_reports_slope_intercept_and_r2():
    fit = bench_scaling._fit_line([100, 200, 400], [1.5, 2.5, 4.5])
    assert fit["slope"] == pytest.approx(0.01) and fit["intercept"] == pytest.approx(0.5)
    assert fit["r2"] == pytest.approx(1.0)


@pytest.mark.slow
def test_scaling_curves_are_measured_fitted_and_plotted(tmp_path, monkeypatch):
    monkeypatch.setitem(bench_cases.SHAPES, "hmdb", ((6, 4), 3, 500))
    result = bench.main(
        [
            "--quick",
            "--dataset",
            "hmdb",
            "--models",
            "mnp",
            "--scaling",
            "--plot-dir",
            str(tmp_path),
            "--set",
            "mnp.d_e=16",
        ]
    )
    sc = result["scaling"]
    assert [p["n_m"] for p in sc["n_m"]["points"]] == [100, 200, 400]
    assert [p["n_t"] for p in sc["n_t"]["points"]] == [50, 100, 200]
    for key in ("n_m", "n_t"):
        for p in sc[key]["points"]:
            assert p["train_step_s"] > 0 and p["test_batch_s"] > 0 and p["train_peak_mem_mb"] > 0
        assert set(sc[key]["fits"]) == {"train_step_s", "test_batch_s", "train_peak_mem_mb", "test_peak_mem_mb"}
    # the context's memory grows with N^m: the memory fits have a positive slope
    assert sc["n_m"]["fits"]["train_peak_mem_mb"]["slope"] > 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["scaling_n_m.png", "scaling_n_t.png"]


def test_test_pass_extrapolation_counts_a_one_off_context_encoding_once():
    assert bench_measure.extrapolate_test(3.0, 1.0, 4.0) == 6.0  # 3 s cold pass (2 s encoding) + 3 more row blocks
    assert bench_measure.extrapolate_test(3.0, None, 4.0) == 12.0  # no reusable state: linear in rows
    assert bench_measure.extrapolate_test(3.0, 1.0, 1.0) == 3.0


def test_ratio_table_reports_against_the_captured_step_where_mnp_graph_was_timed():
    """benchmarks/h200_9de9874/bench_gpu.json timed mnp_graph: MGP and eager MNP against it, per case; a bench
    without it (benchmarks/bench_cpu.json) keeps the table as it was."""
    from pathlib import Path

    from mnp.tools.bench.bench_tables import markdown

    root = Path(__file__).resolve().parents[1] / "benchmarks"
    gpu = markdown(json.loads((root / "h200_9de9874" / "bench_gpu.json").read_text())).splitlines()
    assert any(line.endswith("| MGP/MNP-graph train (target ≥ 3) | MNP eager/graph train |") for line in gpu)
    assert "| handwritten | 2.80 ✗ | 4.33 ✗ | 9.24 ✓ | – | – | 1% | 1% | –, – | 11.59 ✓ | 4.17 |" in gpu
    assert "| caltech101 | 1.38 ✗ | 4.83 ✗ | 8.30 ✓ | – | – | 9% ✗ | 21% ✗ | –, – | 3.05 ✓ | 2.26 |" in gpu
    cpu = markdown(json.loads((root / "bench_cpu.json").read_text()))
    assert "MNP-graph" not in cpu
