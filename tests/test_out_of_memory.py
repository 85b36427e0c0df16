"""Out of memory (docs/reliability.md): a run whose data or model does not fit in the memory it may use ends
in one ``error:`` line naming the sizes and what to reduce, not in a 100-line allocation traceback, and
leaves no outputs. The child process runs under an address-space limit 1 GiB above what it holds once its
modules are imported, so the test does not depend on the machine's memory."""

import re

import numpy as np
import pytest
from cli_utils import hydra_only, run_cli

from mnp.cli.errors import USER_ERRORS, OutOfMemory
from mnp.cli.oom import allocation_failure

HEADROOM = 1 << 30
CHILD = (
    "import resource, runpy, sys; import pytorch_lightning, hydra, mnp.cli.pipeline; "
    "size = int([l for l in open('/proc/self/status') if l.startswith('VmSize')][0].split()[1]) * 1024; "
    f"resource.setrlimit(resource.RLIMIT_AS, (size + {HEADROOM}, size + {HEADROOM})); "
    "sys.argv = ['train.py'] + sys.argv[1:]; runpy.run_path('train.py', run_name='__main__')"
)


def wide_file(path, rows: int, compressed: bool):
    """One view of 100,000 columns (zeros when ``compressed``, so the file stays small) and one of 3."""
    rng = np.random.default_rng(0)
    y = np.arange(rows) % 3
    wide = np.zeros((rows, 100_000), np.float32) if compressed else rng.normal(size=(rows, 100_000)).astype(np.float32)
    (np.savez_compressed if compressed else np.savez)(path, x1=wide, x2=rng.normal(size=(rows, 3)) + y[:, None], y=y)
    return path


@pytest.mark.parametrize(
    "case,rows,overrides,expected",
    [
        # 1,000 rows: the view takes 0.4 GB as float32 in the file and 0.8 GB more as float64
        (
            "loading",
            1000,
            [],
            r"out of memory while loading the data of \S+wide\.npz \(Unable to allocate [\d.]+ MiB for an "
            r"array with shape \(1000, 100000\) and data type float64\): .*; use fewer rows or columns, or give the "
            r"process more memory",
        ),
        # d_e = 4096: the wide view's projection alone is 100,000 × 4096 float32 weights, 1.6 GB
        (
            "the model",
            60,
            ["model.encoder.d_e=4096"],
            r"out of memory \(DefaultCPUAllocator: can't allocate memory: you tried to allocate 1638400000 bytes.*\) with 60 "
            r"rows and views of \[100000, 3\] columns: reduce dataset\.batch_size=200, model\.encoder\.d_e=4096, model\.memory\.size=100, "
            r"model\.decoder\.num_samples=\d+ or the columns of the widest view \(view 1, 100000 columns\), or give the process more memory",
        ),
    ],
)
@pytest.mark.slow
def test_a_run_out_of_memory_is_one_line_naming_the_sizes(tmp_path, case, rows, overrides, expected):
    path = wide_file(tmp_path / "wide.npz", rows, compressed=case == "loading")
    run_dir = tmp_path / "run"
    r = run_cli(
        [
            "-c",
            CHILD,
            "model=mnp",
            "dataset=custom",
            f"dataset.path={path}",
            "trainer.max_epochs=1",
            "logger=none",
            f"hydra.run.dir={run_dir}",
            *overrides,
        ]
    )
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr[-3000:]
    assert re.fullmatch(rf"error: {expected} \(traceback in \S+train\.log\)", lines[0]), lines[0]
    assert hydra_only(run_dir)
    assert (
        "MemoryError" in (run_dir / "train.log").read_text()
        or "DefaultCPUAllocator" in (run_dir / "train.log").read_text()
    )


def test_allocation_failures_are_recognised_and_other_errors_are_not():
    torch_words = (
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
        "to allocate 8000 bytes. Error code 12 (Cannot allocate memory)"
    )
    assert allocation_failure(RuntimeError(torch_words)) == (
        "DefaultCPUAllocator: can't allocate memory: you tried to "
        "allocate 8000 bytes. Error code 12 (Cannot allocate memory)"
    )
    assert allocation_failure(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB.\nGPU 0 ...")).startswith(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0"
    )
    assert allocation_failure(MemoryError()) == "MemoryError"
    assert allocation_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert allocation_failure(ValueError("not enough memory")) is None
    assert allocation_failure(OutOfMemory("already said")) is None
    assert issubclass(OutOfMemory, USER_ERRORS)


def test_the_advice_names_the_sample_count_of_a_sampling_model():
    """N88: `model.decoder.num_samples=1000000` ran out of memory with advice naming every key but that one."""
    from omegaconf import OmegaConf

    from mnp.cli.oom import _settings

    cfg = OmegaConf.create(
        {
            "dataset": {"batch_size": 200},
            "model": {"encoder": {"d_e": 64}, "memory": {"size": 100}, "decoder": {"num_samples": 1000000}},
        }
    )
    assert (
        _settings(cfg)
        == "dataset.batch_size=200, model.encoder.d_e=64, model.memory.size=100, model.decoder.num_samples=1000000"
    )
