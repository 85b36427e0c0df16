"""The benchmark's markdown tables: times, throughput, memory and utilisation per case, the ratios
against their targets (also against ``mnp_graph``, MNP's captured step, where it was timed), the sweep
estimate and the scaling fits."""

from __future__ import annotations

from mnp.tools.report.report_runs import markdown_table

UTIL_TARGET = {"caltech101": 0.4, "cifar10c": 0.4}
CASES = [
    "dataset", "model", "train epoch s", "test s (context reused)", "test samples/s", "peak MiB (train / test)",
    "train GFLOP/s (util)", "test GFLOP/s (util)", "matmul peak GFLOP/s", "batches timed/full", "test rows timed/full",
]  # fmt: skip
RATIOS = [
    "dataset", "MGP/MNP train (target ≥ 3)", "MGP/MNP test (target ≥ 5)", "MGP/MNP test, context reused",
    "MNP/MLP train", "MNP/MLP test", "MNP train util", "MNP test util", "before/after (mnp_ref/mnp) train, test",
]  # fmt: skip
GRAPH_RATIOS = ["MGP/MNP-graph train (target ≥ 3)", "MNP eager/graph train"]  # where mnp_graph was timed


def _case(c: dict) -> list[str]:
    reused = f" ({c['test_s_context_reused']:.3f})" if c["model"] == "mnp" else ""
    return [
        f"{c['dataset']}{'*' if c['extrapolated'] else ''}", c["model"], f"{c['train_epoch_s']:.3f}",
        f"{c['test_s']:.3f}{reused}", f"{c['test_samples_per_s']:.0f}",
        f"{c['peak_mem_mb']:.0f} / {c['test_peak_mem_mb']:.0f}",
        f"{c['train_gflops_per_s']:.1f} ({100 * c['train_util']:.0f}%)",
        f"{c['test_gflops_per_s']:.1f} ({100 * c['test_util']:.0f}%)", f"{c['matmul_peak_gflops_per_s']:.1f}",
        f"{c['train_batches_timed']}/{c['train_batches_full']}", f"{c['test_rows_timed']}/{c['test_rows_full']}",
    ]  # fmt: skip


def _ratio(v: float | None, target: float | None = None) -> str:
    if v is None:
        return "–"
    return f"{v:.2f}" + ("" if target is None else (" ✓" if v >= target else " ✗"))


def _util(c: dict, key: str, target: float | None) -> str:
    if key not in c:
        return "–"
    return f"{100 * c[key]:.0f}%" + ("" if target is None else (" ✓" if c[key] >= target else " ✗"))


def markdown(result: dict) -> str:
    meta = result["meta"]
    out = [
        f"## MNP speed benchmark ({meta['device']}, {meta['threads']} CPU thread(s), precision {meta['precision']}"
        f"{', torch.compile' if meta['compile'] else ''})",
        "",
        f"torch {meta['torch']}; load average {meta['loadavg_start']} at start, {meta['loadavg_end']} at end; "
        f"{meta['repeats']} timed rounds after one warm-up round; medians; ratios are medians of per-round ratios.",
        "Rows marked * are extrapolated from a bounded number of training batches / test rows to the full "
        "epoch / test set (see batches and rows).",
        "",
        markdown_table(CASES, map(_case, result["cases"])),
        "",
    ]
    graph = any("mnp_over_mnp_graph_train" in r for r in result["ratios"].values())
    mnp = {c["dataset"]: c for c in result["cases"] if c["model"] == "mnp"}
    rows = []
    for d, r in result["ratios"].items():
        c, ut = mnp.get(d, {}), UTIL_TARGET.get(d)
        rows.append(
            [d, _ratio(r.get("mgp_over_mnp_train"), 3.0), _ratio(r.get("mgp_over_mnp_test"), 5.0),
             _ratio(r.get("mgp_over_mnp_test_context_reused"), 5.0), _ratio(r.get("mnp_over_mlp_train")),
             _ratio(r.get("mnp_over_mlp_test")), _util(c, "train_util", ut), _util(c, "test_util", ut),
             f"{_ratio(r.get('mnp_ref_over_mnp_train'))}, {_ratio(r.get('mnp_ref_over_mnp_test'))}"]
            + ([_ratio(r.get("mgp_over_mnp_graph_train"), 3.0), _ratio(r.get("mnp_over_mnp_graph_train"))] if graph else [])
        )  # fmt: skip
    out.append(markdown_table(RATIOS + (GRAPH_RATIOS if graph else []), rows))
    if "sweep" in result:
        sw = result["sweep"]
        jobs = [
            [d, f"{v['epochs']} ({v['warmup_epochs']})", f"{v['warmup_epoch_s']:.3f}", f"{v['epoch_s']:.3f}",
             f"{v['test_with_noise_s']:.1f}", f"{v['job_s']:.0f}"]
            for d, v in sw["datasets"].items()
        ]  # fmt: skip
        header = ["dataset", "epochs (warm-up)", "warm-up epoch s", "epoch s", "test with noise s", "one job s"]
        out += [
            "",
            f"### paper_main MNP sweep estimate ({sw['seeds']} seeds, {sw['parallel_jobs']} parallel "
            f"one-thread jobs; start-up {sw['startup_s']:.1f} s per job)",
            "",
            markdown_table(header, jobs),
            f"| **sweep** | | | | | **{sw['total_s']:.0f} s = {sw['total_s'] / 60:.1f} min** (target < 30 min) |",
        ]
    if "scaling" in result:
        fits = [
            [key, f, f"{fit['slope']:.4g}", f"{fit['intercept']:.4g}", f"{fit['r2']:.3f}"]
            for key in ("n_m", "n_t")
            for f, fit in result["scaling"][key]["fits"].items()
        ]
        out += [
            "",
            "### MNP scaling (linear fits)",
            "",
            markdown_table(["against", "quantity", "slope", "intercept", "R²"], fits),
        ]
    return "\n".join(out)
