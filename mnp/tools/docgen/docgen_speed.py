"""The speed tables of docs/gpu.md and docs/speed.md, for :mod:`mnp.tools.docgen` (its ``RENDERERS`` include
these). Sources: ``benchmarks/step_capture_h100.json`` (``python benchmarks/device/step_capture.py`` on an
H100); ``benchmarks/h200_9de9874/*.json`` (one H200 session, provenance in its README.md);
``benchmarks/startup_cpu.json`` (``python benchmarks/startup.py``, this project's CPU machine).
"""

from __future__ import annotations

import json
from pathlib import Path

from mnp.tools.docgen.docgen_sources import reading
from mnp.tools.report.report_runs import dataset_label, markdown_table

GPU_SESSION = "h200_9de9874"
VARIANTS = {
    "graph": "MNP, `accel.cuda_graph=true`",
    "eager": "MNP, eager (`accel.cuda_graph=false`)",
    "graph_tf32": "MNP, captured + TF32 (`accel.matmul_precision=high`)",
    "default": "MNP, defaults (`auto`: captured)",
    "default_tf32": "MNP, defaults + TF32",
    "graph_unbatched": "MNP, captured, noise protocol unbatched",
    "default_unbatched": "MNP, defaults, noise protocol unbatched",
    "mgp": "MGP",
}


def _json(path: Path) -> dict:
    if not path.is_file():
        return {}
    with reading(path):
        return json.loads(path.read_text())


def sources(root: Path) -> dict:
    session = root / "benchmarks" / GPU_SESSION
    return {
        "step_capture": _json(root / "benchmarks" / "step_capture_h100.json"),
        "gpu": {p.stem: _json(p) for p in sorted(session.glob("*.json"))},
        "startup": _json(root / "benchmarks" / "startup_cpu.json"),
        "startup_torchvision": _json(root / "benchmarks" / "startup_torchvision_cpu.json"),
        "startup_idle": _json(root / "benchmarks" / "startup_idle_cpu.json"),
    }


def render_step_capture(src: dict) -> str:
    """MNP's training step on a GPU, eager against one CUDA graph (benchmarks/step_capture_h100.json)."""
    rows = [
        [dataset_label(d), "none" if c.get("host_sync_free") else "some", f"{c['eager_ms']:.2f} ms",
         f"{c['graph_ms']:.2f} ms" if "graph_ms" in c else "capture failed",
         f"{c['speedup']:.1f}×" if "speedup" in c else "–"]
        for d, c in src["step_capture"].get("cases", {}).items()
    ]  # fmt: skip
    syncs = 'host syncs in the step (`set_sync_debug_mode("error")`)'
    return markdown_table(["dataset", syncs, "eager step", "the step as one CUDA graph", "speed-up"], rows)


def render_gpu_runs(src: dict) -> str:
    """Whole train.py runs on the GPU, seed 0 (gpu_check.json of the session)."""
    check = src["gpu"].get("gpu_check", {})
    rows = [
        [f"{dataset_label(r['dataset'])}, {VARIANTS.get(r['variant'], r['variant'])}", f"{100 * r['test/acc']:.2f}",
         f"{r['test/ece']:.4f}", f"{100 * r['noise/acc_mean']:.2f}", f"{r['time/train_epoch_s']:.3f}",
         f"{r['time/total_s']:.2f}", f"{r['wall_s']:.1f}"]
        for r in check.get("runs", [])
    ]  # fmt: skip
    header = ["acc %", "ECE", "noisy acc %", "train s / epoch", "`time/total_s`", "process wall s"]
    return markdown_table([f"run ({check.get('device', '?')})", *header], rows)


def render_gpu_graph_check(src: dict) -> str:
    """graph_check.py on the GPU: captured against eager training inside Lightning."""
    g = src["gpu"].get("graph_check", {})
    if not g:
        return "not measured"
    steps = " and ".join(dict.fromkeys(str(n) for n in g["global_steps"]))
    return (
        f"`graph_check.py` on the {g['device']}: {steps} training steps each way, "
        f"largest parameter difference {g['max_abs_param_diff']:g}, every parameter "
        f"{'finite' if g['finite'] else 'NOT finite'}; fits of {g['seconds'][0]:.2f} s eager and "
        f"{g['seconds'][1]:.2f} s captured."
    )


def render_gpu_bench(src: dict) -> str:
    """Seconds per training epoch and test pass on the GPU, MNP eager and captured against MGP (bench_gpu.json)."""
    bench = src["gpu"].get("bench_gpu", {})
    cases = {(c["dataset"], c["model"]): c for c in bench.get("cases", [])}
    header = [
        f"case ({bench.get('meta', {}).get('device', '?')})", "MNP train epoch s, eager → captured", "MGP train epoch s",
        "MNP eager / captured", "MGP / MNP, eager (target ≥ 3)", "MGP / MNP, captured (target ≥ 3)",
        "MNP / MGP test pass s", "MGP / MNP test (target ≥ 5)",
    ]  # fmt: skip
    rows = []

    def mark(v: float, target: float) -> str:
        return f"{v:.2f} {'✓' if v >= target else '✗'}"

    for d, r in bench.get("ratios", {}).items():
        mnp, graph, mgp = cases[(d, "mnp")], cases[(d, "mnp_graph")], cases[(d, "mgp")]
        star = "*" if mnp["extrapolated"] else ""
        rows.append(
            [f"{dataset_label(d)}{star}", f"{mnp['train_epoch_s']:.3f} → {graph['train_epoch_s']:.3f}",
             f"{mgp['train_epoch_s']:.3f}", f"{r['mnp_over_mnp_graph_train']:.2f}",
             mark(r["mgp_over_mnp_train"], 3), mark(r["mgp_over_mnp_graph_train"], 3),
             f"{mnp['test_s']:.4f} / {mgp['test_s']:.4f}", mark(r["mgp_over_mnp_test"], 5)]
        )  # fmt: skip
    return markdown_table(header, rows)


def render_gpu_noise_batching(src: dict) -> str:
    """The test pass with the noise protocol in calls of N rows on the GPU (noise_batching_gpu.json)."""
    nb = src["gpu"].get("noise_batching_gpu", {})
    rows = [
        [r["noise_batch_rows"] or "0 (one call per level and subset)", f"{r['test_pass_s']:.2f}",
         f"{100 * r['test_acc']:.2f}", f"{100 * r['noise_acc_mean']:.2f}"]
        for r in nb.get("runs", [])
    ]  # fmt: skip
    return markdown_table(
        [f"`eval.noise_batch_rows` ({nb.get('device', '?')})", "test pass s", "test acc %", "noisy acc %"], rows
    )


def render_startup(src: dict, key: str = "startup") -> str:
    """A short train.py run's wall time against time/total_s, before and after (benchmarks/startup_cpu.json; with
    ``key="startup_torchvision"`` the same checkout with and without torchvision installed)."""
    s, rows = src[key], []

    def cell(value) -> str:
        return "–" if value is None else f"{value:.2f}"

    for label in ("before", "after"):
        if (e := s.get(label)) is None:
            continue
        m = e["median"]
        vision = {True: "installed", False: "absent"}.get(e.get("torchvision"), "installed")
        shared = s.get("imports_s") if label == "after" else None  # older files: one import timing, no legs
        imports = (e.get("imports_s") or shared or {}).get("pytorch_lightning")
        imports_cpu = (e.get("imports_cpu_s") or {}).get("pytorch_lightning")
        rows.append(
            [f"{e['commit']} ({label})", vision, f"{m['wall_s']:.1f}", cell(m.get("cpu_s")), f"{m['time/total_s']:.1f}",
             f"{m['wall_minus_total_s']:.1f}", cell(m.get("time/startup_s")), cell(imports), cell(imports_cpu),
             len(e["runs"])]
        )  # fmt: skip
    header = ["commit", "torchvision", "process wall s", "process CPU s", "`time/total_s`", "wall − total s",
              "`time/startup_s`", "`import pytorch_lightning` wall s", "its CPU s", "runs"]  # fmt: skip
    table = markdown_table(header, rows)
    if load := s.get("loadavg"):
        table += f"\n\nMedians; load average {load[0]}–{load[1]} on {s['after']['cpus']} cores."
    return table


RENDERERS = {
    "step_capture": render_step_capture,
    "gpu_runs": render_gpu_runs,
    "gpu_graph_check": render_gpu_graph_check,
    "gpu_bench": render_gpu_bench,
    "gpu_noise_batching": render_gpu_noise_batching,
    "startup": render_startup,
    "startup_torchvision": lambda src: render_startup(src, "startup_torchvision"),
    "startup_idle": lambda src: render_startup(src, "startup_idle"),
}
