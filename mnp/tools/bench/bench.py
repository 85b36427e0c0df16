"""Speed benchmark of MNP against MGP and an MLP floor (docs/method.md §5, the paper's Table 5).

    python -m mnp.tools.bench [--dataset NAME ...] [--json PATH] [--threads 1] [--quick]
                        [--models mnp mnp_ref mnp_graph mgp mlp] [--scaling] [--profile] [--sweep]

Cases: the real handwritten, cub, pie and scene15 (``$MNP_DATA_DIR``; skipped when absent) and
synthetic data with the shapes of caltech101 (2 × 4096, K = 101, N = 8677), hmdb (2 × 1000, K = 51,
N = 6718) and cifar10c (3 × 2048, K = 10, N = 50000): class-clustered Gaussians, 80/20 split.
Every model is built from its per-dataset config (``conf/model_dataset/<model>_<dataset>.yaml``).

* **Training**: one epoch = a Lightning ``fit`` pass over the training set in batches of 200, through
  the model's own ``training_step`` (MNP: manual optimisation; its main stage, i.e. with
  ``warmup.epochs=0``; the warm-up stage only trains the projection on L_RBF). For the synthetic
  shapes (and every dataset under ``--quick``) an epoch is bounded to ``--max-batches`` batches and
  extrapolated to the full epoch (the output says so).
* **Test**: the clean test set through ``predict`` in batches of 1000 (no noise protocol), with
  ``--max-test-rows`` rows at most, extrapolated to the full test set: linearly in rows, except that
  MNP's context encoding (computed once per pass and cached between its batches) is counted once:
  full = cold pass + (scale − 1) × a second pass that reuses the encodings. The cache is cleared
  before every timed (cold) pass; the second pass is also reported ("context reused").
* Rounds: one warm-up round, then ``--repeats`` rounds; in each round every model trains one epoch
  and runs one test pass, models in rotating order, so machine load hits all of them alike. Times
  are medians over the rounds; the ratios MGP/MNP and MNP/MLP are medians of the per-round ratios.
* **Utilisation**: FLOPs of the epoch's training steps and of a test pass are counted with
  ``torch.utils.flop_counter.FlopCounterMode`` (matmul-class ops only: elementwise work, sorting and
  MGP's Cholesky factorisations are not counted), divided by the measured time and compared with a
  dense float32 matmul (2048³ on CPU, 8192³ on CUDA) timed in every round of the same run.
* **Memory**: peak bytes of live tensor storages on the device during one steady-state training step
  (parameters, gradients, optimiser state, activations, temporaries) and one test batch, tracked op
  by op with a dispatch mode (:class:`mnp.tools.bench.bench_measure.LiveTensorBytes`), not the process's resident set.
* **Step metrics** (``mnp.tools.bench.step_metrics``): ATen ops, host syncs (which ops) and ``torch._dynamo``
  graph breaks of one steady-state training step: what stands between the step and one CUDA graph.
* ``--scaling``: MNP's training step and test batch against N^m (100 … 3200) and N_T, with linear
  fits and plots (``--plot-dir``).
* ``--profile``: where MNP's training step goes (regions and top operators, torch.profiler), and
  sparsemax with a full sort against partial sorts on the case's real attention scores.
* ``--sweep``: the ``experiment=paper_main`` MNP sweep on the real datasets estimated from measured
  parts (warm-up epoch, main epoch, test with the noise protocol, process start-up).
* ``--models ... mnp_ref``: MNP's straightforward reference implementation (``fast=False``, same
  math) side by side: the before/after of the optimisations. ``mnp_graph``: MNP with
  ``accel.cuda_graph`` (its training step replayed as CUDA graphs on a GPU, the emulated bookkeeping
  elsewhere), timed on its second epoch, after the capture.
* ``--precision bf16-mixed`` (bf16 autocast; attention, sparsemax and the variances stay float32) and
  ``--compile`` (MNP's ``compile=True``) are switches.

CPU threads default to 1 (``--threads``): the machine's 2 cores are shared with other jobs.

This module holds the command and the rounds of one case; the parts: ``mnp.tools.bench.bench_cases`` (datasets,
configs, models, the MLP floor), ``mnp.tools.bench.bench_measure`` (times, FLOPs, memory peaks), ``mnp.tools.bench.bench_scaling``,
``mnp.tools.bench.bench_profile``, ``mnp.tools.bench.bench_sweep`` (the optional studies) and ``mnp.tools.bench.bench_tables`` (markdown).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

from mnp.tools.bench.bench_cases import (
    BATCH,
    DATASETS,
    EVAL_BATCH,
    MODELS,
    OPTIONAL_MODELS,
    SHAPES,
    Case,
    build_model,
    load_case,
    set_dotted,
)
from mnp.tools.bench.bench_measure import (
    epoch_batches,
    extrapolate_test,
    matmul_gflops,
    memory_peaks,
    step_metrics_of,
    test_flops,
    test_pass,
    train_epoch,
    training_flops,
)
from mnp.tools.bench.bench_profile import profile_case
from mnp.tools.bench.bench_scaling import plot_scaling, scaling
from mnp.tools.bench.bench_sweep import sweep_estimate
from mnp.tools.bench.bench_tables import markdown

log = logging.getLogger("mnp.tools.bench")


# ---------------------------------------------------------------------------- one dataset
def bench_case(case: Case, models: tuple[str, ...], args, device: torch.device) -> tuple[list[dict], dict, dict]:
    """One dataset: a warm-up round and the timed rounds of every model, then their FLOPs, memory peaks and
    step metrics; returns the per-model rows, the ratios between models and the rounds' matmul peaks."""
    dm = case.dm
    n_train_rows, n_test_rows = len(dm.train_y), len(dm.test_y)
    full_batches = math.ceil(case.n_train_full / BATCH)
    limit = args.max_batches if (case.synthetic or args.quick) and args.max_batches else None
    timed_batches = min(full_batches, limit or full_batches, math.ceil(n_train_rows / BATCH))
    train_scale = full_batches / timed_batches
    test_scale = case.n_test_full / n_test_rows
    torch.manual_seed(0)
    extra = {**args.model_extra, "mlp": {**args.model_extra["mnp"], **args.model_extra["mlp"]}}
    built = {m: build_model(m, case.name, dm.num_classes, dm.view_dims, extra[m]) for m in models}
    if "mnp_graph" in built:  # captured on a GPU; elsewhere the graph path's bookkeeping alone
        built["mnp_graph"].cuda_graph = True if device.type == "cuda" else "emulate"
    test_views = [v.to(device) for v in dm.test_views]
    rec = {m: {"train": [], "test": [], "test_warm": []} for m in models}
    cached = {m for m in models if m == "mnp"}  # the fast MNP reuses its context encodings
    peaks = []
    rounds = 1 + args.repeats
    for r in range(rounds):
        peaks.append(matmul_gflops(device, torch.bfloat16 if args.precision.startswith("bf16") else torch.float32))
        order = list(models[r % len(models) :] + models[: r % len(models)])
        for m in order:
            warm = r == 0
            # mnp_graph: the second epoch, once every batch shape is captured (a run captures once)
            t = train_epoch(
                built[m], dm, device, 1 if warm else timed_batches, args.precision, epochs=2 if m == "mnp_graph" else 1
            )
            ts, tw = test_pass(
                built[m],
                test_views if not warm else [v[:EVAL_BATCH] for v in test_views],
                device,
                args.precision,
                warm=m in cached,
            )
            if not warm:
                rec[m]["train"].append(t * train_scale)
                rec[m]["test"].append(extrapolate_test(ts, tw, test_scale))
                rec[m]["test_warm"].append((ts if tw is None else tw) * test_scale)
        log.info("%s: round %d/%d done", case.name, r + 1, rounds)
    peak = statistics.median(peaks[1:] or peaks)
    sizes_timed = epoch_batches(min(n_train_rows, timed_batches * BATCH))
    cases = []
    for m in models:
        model = built[m]
        train_fl = training_flops(model, dm, device, sizes_timed, args.precision)
        test_fl = test_flops(model, test_views, device, args.precision, test_scale)
        train_mem, test_mem = memory_peaks(model, dm, test_views, device, args.precision)
        steps = step_metrics_of(model, dm, device, args)
        train_s, test_s = statistics.median(rec[m]["train"]), statistics.median(rec[m]["test"])
        train_gf = train_fl * train_scale / train_s / 1e9
        test_gf = test_fl / test_s / 1e9
        cases.append(
            {
                "dataset": case.name,
                "model": m,
                "train_epoch_s": train_s,
                "test_s": test_s,
                "test_s_context_reused": statistics.median(rec[m]["test_warm"]),
                "test_samples_per_s": case.n_test_full / test_s,
                "peak_mem_mb": train_mem,
                "test_peak_mem_mb": test_mem,
                "train_gflops_per_s": train_gf,
                "test_gflops_per_s": test_gf,
                "matmul_peak_gflops_per_s": peak,
                "train_util": train_gf / peak,
                "test_util": test_gf / peak,
                "train_step_gflop": train_fl / len(sizes_timed) / 1e9,
                "test_pass_gflop": test_fl / 1e9,
                "train_batches_timed": timed_batches,
                "train_batches_full": full_batches,
                "test_rows_timed": n_test_rows,
                "test_rows_full": case.n_test_full,
                "extrapolated": train_scale > 1 or test_scale > 1,
                "train_epoch_s_rounds": rec[m]["train"],
                "test_s_rounds": rec[m]["test"],
                **steps,
            }
        )
    ratios = {}
    if "mnp" in models:

        def paired(a, b, kind):
            return statistics.median(x / y for x, y in zip(rec[a][kind], rec[b][kind]))

        if "mgp" in models:
            ratios["mgp_over_mnp_train"] = paired("mgp", "mnp", "train")
            ratios["mgp_over_mnp_test"] = paired("mgp", "mnp", "test")
            ratios["mgp_over_mnp_test_context_reused"] = statistics.median(
                x / y for x, y in zip(rec["mgp"]["test"], rec["mnp"]["test_warm"])
            )
        if "mlp" in models:
            ratios["mnp_over_mlp_train"] = paired("mnp", "mlp", "train")
            ratios["mnp_over_mlp_test"] = paired("mnp", "mlp", "test")
        if "mnp_ref" in models:
            ratios["mnp_ref_over_mnp_train"] = paired("mnp_ref", "mnp", "train")
            ratios["mnp_ref_over_mnp_test"] = paired("mnp_ref", "mnp", "test")
        if "mnp_graph" in models:
            ratios["mnp_over_mnp_graph_train"] = paired("mnp", "mnp_graph", "train")
            if "mgp" in models:
                ratios["mgp_over_mnp_graph_train"] = paired("mgp", "mnp_graph", "train")
    return cases, ratios, {"matmul_peak_rounds": peaks}


# ---------------------------------------------------------------------------- the command
def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m mnp.tools.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument(
        "--models",
        nargs="+",
        default=list(MODELS),
        choices=MODELS + OPTIONAL_MODELS,
        help="mnp_ref: MNP's straightforward reference implementation, for before/after; "
        "mnp_graph: MNP with accel.cuda_graph",
    )
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--threads", type=int, default=1, help="CPU intra-op threads (default 1)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--precision",
        default="32-true",
        choices=("32-true", "bf16-mixed"),
        help="bf16-mixed: bf16 autocast (attention, sparsemax and variances stay float32)",
    )
    p.add_argument("--compile", action="store_true", help="MNP with torch.compile on its hot paths")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds after the warm-up round")
    p.add_argument(
        "--max-batches",
        type=int,
        default=3,
        help="training batches per timed epoch for the synthetic shapes (extrapolated to the full epoch)",
    )
    p.add_argument("--max-test-rows", type=int, default=1000, help="test rows of the synthetic shapes (extrapolated)")
    p.add_argument(
        "--quick", action="store_true", help="tiny run: 2 rounds, 1 batch, 200 test rows, every dataset bounded"
    )
    p.add_argument("--scaling", action="store_true", help="also measure MNP against N^m and N_T and plot it")
    p.add_argument("--scaling-shape", default="hmdb", choices=tuple(SHAPES))
    p.add_argument("--plot-dir", type=Path, default=Path("benchmarks"))
    p.add_argument("--profile", action="store_true", help="also print where MNP's training step goes")
    p.add_argument(
        "--sweep",
        action="store_true",
        help="also estimate the paper_main MNP sweep (real datasets, 5 seeds, 2 parallel jobs) from measured parts",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="MODEL.KEY=VALUE",
        help="override a model's config, e.g. mnp.encoder.d_e=256 (the MLP floor follows mnp's widths)",
    )
    p.add_argument("--data-dir", default=None)
    p.add_argument(
        "--no-step-metrics",
        dest="step_metrics",
        action="store_false",
        help="skip the ops / host syncs / graph breaks of one training step (mnp.tools.bench.step_metrics)",
    )
    p.add_argument(
        "--no-graph-breaks",
        dest="graph_breaks",
        action="store_false",
        help="step metrics without torch._dynamo.explain (its tracing takes seconds per model)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.max_batches, args.max_test_rows = min(args.repeats, 2), 1, 200
    import yaml

    args.model_extra = {m: {} for m in MODELS + OPTIONAL_MODELS}
    for item in args.set:
        key, eq, value = item.partition("=")
        model, _, name = key.partition(".")
        if model not in args.model_extra or not name or not eq:
            p.error(f"--set {item}: expected MODEL.KEY=VALUE with MODEL one of {', '.join(args.model_extra)}")
        set_dotted(args.model_extra[model], name, yaml.safe_load(value))
        if model == "mnp":
            for twin in ("mnp_ref", "mnp_graph"):
                set_dotted(args.model_extra[twin], name, yaml.safe_load(value))
    if args.compile:
        args.model_extra["mnp"]["compile"] = True
    return args


def run(args) -> dict:
    """The measurements, with the libraries' and datamodules' warnings and info lines silenced while they run
    (restored after: a caller in the same process, a test, keeps its logging)."""
    quiet = [
        logging.getLogger(name)
        for name in ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric", "datamodules")
    ]
    levels = [logger.level for logger in quiet]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        for logger in quiet:
            logger.setLevel(logging.ERROR)
        try:
            return _measure(args)
        finally:
            for logger, level in zip(quiet, levels):
                logger.setLevel(level)


def _measure(args) -> dict:
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    meta = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
        "threads": torch.get_num_threads(),
        "precision": args.precision,
        "compile": args.compile,
        "torch": torch.__version__,
        "repeats": args.repeats,
        "quick": args.quick,
        "loadavg_start": round(os.getloadavg()[0], 2),
        "command": " ".join(sys.argv),
    }
    print(
        f"# mnp.tools.bench: {meta['device']}, torch.set_num_threads({meta['threads']}), precision {args.precision}",
        flush=True,
    )
    result = {"cases": [], "ratios": {}, "meta": meta, "matmul_peak_rounds": {}}
    rows = args.max_batches * BATCH if args.max_batches else None
    for name in args.dataset:
        case = load_case(name, rows, args.max_test_rows if (name in SHAPES or args.quick) else None, args.data_dir)
        if case is None:
            continue
        t0 = time.perf_counter()
        cases, ratios, extra = bench_case(case, tuple(args.models), args, device)
        result["cases"] += cases
        if ratios:
            result["ratios"][name] = ratios
        result["matmul_peak_rounds"][name] = extra["matmul_peak_rounds"]
        print(
            f"{name}: "
            + ", ".join(f"{c['model']} train {c['train_epoch_s']:.3f}s test {c['test_s']:.3f}s" for c in cases)
            + f" ({time.perf_counter() - t0:.0f}s)",
            flush=True,
        )
        if args.profile and "mnp" in args.models:
            result.setdefault("profiles", {})[name] = profile_case(case, device)
    if args.sweep and "mnp" in args.models:
        result["sweep"] = sweep_estimate(args, device, result["cases"])
    if args.scaling:
        result["scaling"] = scaling(args, device)
        result["scaling"]["plots"] = [str(p) for p in plot_scaling(result["scaling"], args.plot_dir)]
    meta["loadavg_end"] = round(os.getloadavg()[0], 2)
    return result


def main(argv=None) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    result = run(args)
    print(markdown(result))
    from mnp.tools.bench.step_metrics import markdown as step_markdown

    if table := step_markdown(result["cases"]):
        print("\n" + table)
    for text in result.get("profiles", {}).values():
        print("\n" + text)
    if "scaling" in result:
        print("\nscaling plots: " + ", ".join(result["scaling"]["plots"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
        print(f"JSON: {args.json}")
    return result


def cli() -> int:
    """``mnp-bench``: the command, exit status 0 (``main`` returns the results for callers in Python)."""
    main()
    return 0
