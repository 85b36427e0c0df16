"""``python -m mnp.tools.bench --profile``: where MNP's training step goes (torch.profiler), and sparsemax
with a full sort against partial sorts on a case's real attention scores."""

from __future__ import annotations

import statistics
import time

import torch

from mnp.tools.bench.bench_cases import BATCH, Case, build_model
from mnp.tools.bench.bench_measure import sync


def profile_case(case: Case, device: torch.device, steps: int = 3) -> str:
    """Where one MNP training step goes: labelled regions and the top operators (self time)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    dm = case.dm
    model = build_model("mnp", case.name, dm.num_classes, dm.view_dims).to(device)
    model.init_memory(dm.train_views, dm.train_y)
    opt = model.configure_optimizers()["optimizer"]
    views, y = [v[:BATCH].to(device) for v in dm.train_views], dm.train_y[:BATCH].to(device)
    clip = model.spec.optim.clip_norm

    def step():
        with record_function("step.forward"):
            loss, _ = model.training_loss(views, y)
        opt.zero_grad(set_to_none=True)
        with record_function("step.backward"):
            loss.backward()
        with record_function("step.clip"):
            if clip:
                model.configure_gradient_clipping(opt, clip)
        with record_function("step.optimizer"):
            opt.step()
        with record_function("step.memory_update"):
            model.on_train_batch_end(None, None, 0)

    step()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
    events = prof.key_averages()
    sparsemax_info, sparsemax_ms = sparsemax_timings(model, views, device)
    regions = [
        (e.key, e.cpu_time_total / steps / 1e3) for e in events if e.key.startswith("step.") or e.key.startswith("mnp.")
    ]
    total = sum(t for k, t in regions if k.startswith("step."))
    lines = [
        f"### where MNP's training step goes: {case.name} ({steps} steps, ms per step)",
        "",
        "| region | ms | % of step |",
        "|---|---|---|",
    ]
    for k, t in sorted(regions, key=lambda kv: (not kv[0].startswith("step."), -kv[1])):
        lines.append(f"| {k} | {t:.1f} | {100 * t / total:.1f} |")
    lines += [
        "",
        f"sparsemax, forward + backward, on this case's attention {sparsemax_info} (ms): "
        + ", ".join(f"{k}: {v:.1f}" for k, v in sparsemax_ms.items()),
        "",
        "top operators by self time:",
        "```",
        events.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40),
        "```",
    ]
    return "\n".join(lines)


def sparsemax_timings(model, views, device: torch.device, reps: int = 5) -> tuple[str, dict[str, float]]:
    """entmax's sparsemax with a full sort against partial sorts (top-k, exact) on real scores."""
    from mnp.model.attention import normalise, topk_hint

    scores = model.explain(views).scores.float()
    grad = torch.randn_like(scores)
    n = scores.shape[-1]
    hint = topk_hint(normalise(scores, "sparsemax"))
    ks = {"full sort": None, f"top-k hint ({hint})": hint, **{f"k={k}": k for k in (32, 128) if k < n}}

    def run(k):
        x = scores.clone().requires_grad_()
        (normalise(x, "sparsemax", k) * grad).sum().backward()

    out = {}
    for name, k in ks.items():
        if name.startswith("top-k") and hint is None:
            continue
        run(k)
        times = []
        for _ in range(reps):
            sync(device)
            t0 = time.perf_counter()
            run(k)
            sync(device)
            times.append(time.perf_counter() - t0)
        out[name] = 1e3 * statistics.median(times)
    support = (normalise(scores, "sparsemax") > 0).sum(-1).float()
    return f"scores {tuple(scores.shape)}, support mean {support.mean():.0f} / max {support.max():.0f}", out
