"""The benchmark's markdown tables: times, throughput, memory and utilisation per case, the ratios
against their targets (also against ``mnp_graph``, MNP's captured step, where it was timed), the sweep
estimate and the scaling fits."""

from __future__ import annotations

UTIL_TARGET = {"caltech101": 0.4, "cifar10c": 0.4}


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
        "| dataset | model | train epoch s | test s (context reused) | test samples/s | peak MiB (train / test) "
        "| train GFLOP/s (util) | test GFLOP/s (util) | matmul peak GFLOP/s | batches timed/full | test rows timed/full |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in result["cases"]:
        star = "*" if c["extrapolated"] else ""
        reused = f" ({c['test_s_context_reused']:.3f})" if c["model"] == "mnp" else ""
        out.append(
            f"| {c['dataset']}{star} | {c['model']} | {c['train_epoch_s']:.3f} | {c['test_s']:.3f}{reused} | "
            f"{c['test_samples_per_s']:.0f} | {c['peak_mem_mb']:.0f} / {c['test_peak_mem_mb']:.0f} | "
            f"{c['train_gflops_per_s']:.1f} ({100 * c['train_util']:.0f}%) | "
            f"{c['test_gflops_per_s']:.1f} ({100 * c['test_util']:.0f}%) | {c['matmul_peak_gflops_per_s']:.1f} | "
            f"{c['train_batches_timed']}/{c['train_batches_full']} | {c['test_rows_timed']}/{c['test_rows_full']} |"
        )
    graph = any("mnp_over_mnp_graph_train" in r for r in result["ratios"].values())  # mnp_graph was timed
    out += [
        "",
        "| dataset | MGP/MNP train (target ≥ 3) | MGP/MNP test (target ≥ 5) | MGP/MNP test, context reused "
        "| MNP/MLP train | MNP/MLP test | MNP train util | MNP test util | before/after (mnp_ref/mnp) train, test |"
        + (" MGP/MNP-graph train (target ≥ 3) | MNP eager/graph train |" if graph else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if graph else ""),
    ]
    mnp = {c["dataset"]: c for c in result["cases"] if c["model"] == "mnp"}

    def fmt(v, target=None):
        if v is None:
            return "–"
        return f"{v:.2f}" + ("" if target is None else (" ✓" if v >= target else " ✗"))

    for d, r in result["ratios"].items():
        c = mnp.get(d, {})
        ut = UTIL_TARGET.get(d)

        def util(key: str, c: dict = c, ut: float | None = ut) -> str:
            return (
                "–"
                if key not in c
                else f"{100 * c[key]:.0f}%" + ("" if ut is None else (" ✓" if c[key] >= ut else " ✗"))
            )

        out.append(
            f"| {d} | {fmt(r.get('mgp_over_mnp_train'), 3.0)} | {fmt(r.get('mgp_over_mnp_test'), 5.0)} | "
            f"{fmt(r.get('mgp_over_mnp_test_context_reused'), 5.0)} | "
            f"{fmt(r.get('mnp_over_mlp_train'))} | {fmt(r.get('mnp_over_mlp_test'))} | {util('train_util')} | "
            f"{util('test_util')} | {fmt(r.get('mnp_ref_over_mnp_train'))}, {fmt(r.get('mnp_ref_over_mnp_test'))} |"
            + (
                f" {fmt(r.get('mgp_over_mnp_graph_train'), 3.0)} | {fmt(r.get('mnp_over_mnp_graph_train'))} |"
                if graph
                else ""
            )
        )
    if "sweep" in result:
        sw = result["sweep"]
        out += [
            "",
            f"### paper_main MNP sweep estimate ({sw['seeds']} seeds, {sw['parallel_jobs']} parallel "
            f"one-thread jobs; start-up {sw['startup_s']:.1f} s per job)",
            "",
            "| dataset | epochs (warm-up) | warm-up epoch s | epoch s | test with noise s | one job s |",
            "|---|---|---|---|---|---|",
        ]
        for d, v in sw["datasets"].items():
            out.append(
                f"| {d} | {v['epochs']} ({v['warmup_epochs']}) | {v['warmup_epoch_s']:.3f} | {v['epoch_s']:.3f} | "
                f"{v['test_with_noise_s']:.1f} | {v['job_s']:.0f} |"
            )
        out.append(
            f"| **sweep** | | | | | **{sw['total_s']:.0f} s = {sw['total_s'] / 60:.1f} min** (target < 30 min) |"
        )
    if "scaling" in result:
        out += [
            "",
            "### MNP scaling (linear fits)",
            "",
            "| against | quantity | slope | intercept | R² |",
            "|---|---|---|---|---|",
        ]
        for key in ("n_m", "n_t"):
            for f, fit in result["scaling"][key]["fits"].items():
                out.append(f"| {key} | {f} | {fit['slope']:.4g} | {fit['intercept']:.4g} | {fit['r2']:.3f} |")
    return "\n".join(out)
