"""MNP's training step on a GPU: host syncs, and eager against one captured CUDA graph.

    python benchmarks/device/step_capture.py --json benchmarks/step_capture_cuda.json [--datasets handwritten scene15]
    python benchmarks/device/step_capture.py --from-log LOG --json OUT   # the JSON of an earlier run's printed lines

Per dataset: a steady-state step (``mnp.tools.bench.step_metrics.step_function``: forward, both losses, backward,
per-tensor clipping, L2, Adam, the DCM update) under ``torch.cuda.set_sync_debug_mode("error")``; its
time eager (mean of 50 steps); and the same step captured once as a ``torch.cuda.CUDAGraph`` with a
capturable fused Adam on a static batch of 200 rows, replayed 50 times. This measures what a captured
step would give; train.py does not capture the step yet (docs/gpu.md).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

LINE = re.compile(
    r"^(?P<d>\w+): step eager (?P<eager>[\d.]+) ms(?:, one CUDA graph (?P<graph>[\d.]+) ms .*"
    r"parameters finite after replays: (?P<finite>\w+))?"
)
SYNC = re.compile(r"^(?P<d>\w+): (?P<what>no host sync|sync in the step)")


def measure(name: str, steps: int = 50) -> list[str]:
    import torch

    from mnp.tools.bench import bench_cases, step_metrics

    dev = torch.device("cuda")
    lines = []
    case = bench_cases.load_case(name, None, 200, None)
    model = bench_cases.build_model("mnp", name, case.dm.num_classes, case.dm.view_dims).to(dev)
    model.init_memory([v.to(dev) for v in case.dm.train_views], case.dm.train_y.to(dev))
    views, y = [v[:200].to(dev) for v in case.dm.train_views], case.dm.train_y[:200].to(dev)
    opt = step_metrics.main_optimizer(model)
    step = step_metrics.step_function(model, opt, views, y)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    try:
        torch.cuda.set_sync_debug_mode("error")
        step()
        lines.append(f"{name}: no host sync in a steady-state step")
    except RuntimeError as e:
        lines.append(f"{name}: sync in the step: {str(e)[:300]}")
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    eager = (time.perf_counter() - t) / steps
    params = [p for g in opt.param_groups for p in g["params"]]
    copt = torch.optim.Adam(params, lr=torch.tensor(opt.param_groups[0]["lr"], device=dev), fused=True, capturable=True)
    cstep = step_metrics.step_function(model, copt, views, y)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
        for _ in range(3):
            cstep()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cstep()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        graph.replay()
    torch.cuda.synchronize()
    captured = (time.perf_counter() - t) / steps
    finite = all(torch.isfinite(p).all().item() for p in params)
    lines.append(
        f"{name}: step eager {eager * 1e3:.2f} ms, one CUDA graph {captured * 1e3:.2f} ms "
        f"({eager / captured:.1f}x), parameters finite after replays: {finite}"
    )
    return lines


def parse(lines: list[str]) -> dict:
    """{dataset: {host_sync_free, eager_ms, graph_ms, speedup, finite}} from the printed lines."""
    out: dict[str, dict] = {}
    for line in lines:
        if m := SYNC.match(line):
            out.setdefault(m["d"], {})["host_sync_free"] = m["what"] == "no host sync"
        elif m := LINE.match(line):
            r = out.setdefault(m["d"], {})
            r["eager_ms"] = float(m["eager"])
            if m["graph"]:
                r.update(
                    graph_ms=float(m["graph"]),
                    speedup=round(float(m["eager"]) / float(m["graph"]), 2),
                    finite=m["finite"] == "True",
                )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["handwritten", "scene15"])
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--from-log", type=Path, help="parse the lines an earlier run printed instead of measuring")
    ap.add_argument("--device-name", default=None, help="recorded in the JSON (default: torch's name of the GPU)")
    args = ap.parse_args(argv)
    if args.from_log:
        lines = args.from_log.read_text().splitlines()
        device = args.device_name
    else:
        import torch

        lines = []
        for name in args.datasets:
            for line in measure(name):
                print(line, flush=True)
                lines.append(line)
        device = args.device_name or torch.cuda.get_device_name()
    result = {
        "device": device,
        "batch_rows": 200,
        "steps_timed": 50,
        "cases": parse(lines),
        "command": "python benchmarks/device/step_capture.py",
    }
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
