"""What one machine gives a run: how many sweep jobs run at once on its one GPU (``${mnp_gpu_jobs:}``, the
``n_jobs`` of conf/launcher/gpu_joblib.yaml, docs/gpu.md), and how many torch threads a run takes.

One job per CPU core but one (each job is a one-thread ``train.py`` process that feeds the GPU), and at most
one per :data:`GIB_PER_JOB` of GPU memory: 15 on the 16-core H100 and H200 machines, where 15 processes
trained the paper's sweep. The GPU's memory comes from ``nvidia-smi``, so the launching process opens no
CUDA context; without it, the CPU count alone decides.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

GIB_PER_JOB = 4  # a CUDA context and one MNP or baseline process, with room to spare


def gpu_memory_gib() -> float | None:
    """The first GPU's memory in GiB (``nvidia-smi``), None where there is none or it cannot say."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.split()
        return float(out[0]) / 1024 if out else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def cpu_count() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def gpu_jobs(cpus: int | None = None, gib: float | None = None, probe: bool = True) -> int:
    """Parallel jobs for ``cpus`` cores and ``gib`` GiB of GPU memory (read from the machine when ``probe``)."""
    cpus = cpu_count() if cpus is None else cpus
    gib = gpu_memory_gib() if gib is None and probe else gib
    jobs = max(cpus - 1, 1)
    return jobs if gib is None else max(min(jobs, int(gib // GIB_PER_JOB)), 1)


def load_average() -> float:
    """The 1-minute load average: runnable processes, ours and others'; 0 where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def free_threads(cores: int, load: float) -> int:
    """Intra-op threads for a run that was given none: the ``cores`` this process may use less the ``load``
    already on them, rounded, at least 1. On a shared 2-core machine under a busy sweep, torch's default of
    one thread per core made runs 5-15× slower than one thread."""
    return max(1, min(cores, int(cores - load + 0.5)))


def set_threads(n: int | None) -> int:
    """Set torch's intra-op threads to ``n`` (``torch_threads``: ``MNP_TORCH_THREADS``) when given, else to
    :func:`free_threads` of this machine, logged in one line. Returns the count."""
    import torch

    if n:
        chosen = int(n)
    else:
        cores, load = cpu_count(), load_average()
        chosen = free_threads(cores, load)
        logging.getLogger(__name__).info(
            "torch threads: %d (%d cores, load %.1f); MNP_TORCH_THREADS=<n> sets it", chosen, cores, load
        )
    torch.set_num_threads(chosen)
    return chosen
