"""Fuzzing ``dataset=custom`` (hypothesis): whatever a .npz holds (random shapes, dtypes, NaN/inf, huge
values, label sets), ``train.py`` either trains normally (exit 0, metrics.json and predictions.npz
written) or prints one ``error: <file>: ...`` line, exits 1 and leaves no outputs. Files that are clean
must train; files with a defect every run must reject must fail.

The examples run in-process through the CLI's guard (:func:`mnp.cli.cli.run_guarded`, what ``train.py``
calls; a subprocess costs ~10 s of imports here); two fixed examples run as real subprocesses.
"""

import contextlib
import io
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from cfg_utils import compose_train
from cli_utils import run_cli
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from mnp.cli.cli import run_guarded
from mnp.cli.pipeline import train

ARGS = [
    "model=mlp",
    "trainer.max_epochs=2",
    "dataset=custom",
    "eval.noise=false",
    "skip_if_done=false",
    "ckpt_path=null",
]
REAL = ("float64", "float32", "int64", "uint8", "bool")
DTYPES = (*REAL, "complex128", "object", "str")
LABEL_SETS = [(0, 1, 2), (0, 1, 2), (1, 2, 3), (0, 5, 10**9), (0, 7), (0, 1, 2, 3), (3,), (0, -1, 2)]


@dataclass
class View:
    dtype: str
    dims: int = 2
    shape: str = "ok"  # ok, 1d, 3d (an extra axis) or short (one row fewer than the labels)
    scale: float = 1.0
    special: float | None = None  # NaN or ±inf written into one cell (float dtypes only)


def cast(x: np.ndarray, dtype: str, rng) -> np.ndarray:
    """Features of ``dtype`` (integers are drawn afresh: a cast of NaN or 1e307 is not what a user saves)."""
    if dtype == "int64":
        return rng.integers(-50, 50, size=x.shape)
    if dtype == "uint8":
        return rng.integers(0, 256, size=x.shape, dtype=np.uint8)
    if dtype == "bool":
        return x > 0
    if dtype == "complex128":
        return x * (1 + 1j)
    return x.astype(dtype)  # float64, float32 (1e200 becomes inf), object, str


@dataclass
class Case:
    n: int
    labels: tuple
    label_kind: str  # int, float or fractional (integer + 0.5)
    views: list
    seed: int = 0

    @np.errstate(over="ignore", invalid="ignore")  # float32 of 1e200 is inf: part of the fuzz
    def arrays(self) -> dict:
        rng = np.random.default_rng(self.seed)
        y = np.asarray(self.labels)[rng.integers(len(self.labels), size=self.n)]
        out = {"y": y if self.label_kind == "int" else y + (0.5 if self.label_kind == "fractional" else 0.0)}
        for i, v in enumerate(self.views):
            x = (rng.normal(size=(self.n, v.dims)) + y[:, None] % 5) * v.scale
            if v.special is not None and v.dtype.startswith("float"):
                x[rng.integers(self.n), rng.integers(v.dims)] = v.special
            x = cast(x, v.dtype, rng)
            out[f"x{i + 1}"] = {"ok": x, "1d": x[:, 0], "3d": x[..., None], "short": x[:-1]}[v.shape]
        return out

    def must_fail(self) -> bool:
        """A defect every run must reject."""
        y = self.arrays()["y"]
        return (
            any(
                v.dtype not in REAL or v.shape != "ok" or (v.special is not None and v.dtype.startswith("float"))
                for v in self.views
            )
            or self.label_kind == "fractional"
            or (y < 0).any()
            or len(np.unique(y)) < 2
        )

    def must_train(self) -> bool:
        """Clean: real finite values of moderate size, >= 2 classes of >= 3 samples (a non-empty test split)."""
        counts = np.unique(self.arrays()["y"], return_counts=True)[1]
        return (
            not self.must_fail() and all(v.scale <= 1e6 for v in self.views) and len(counts) >= 2 and counts.min() >= 3
        )


@st.composite
def cases(draw) -> Case:
    """Mostly plausible files (repeated entries weight the choices), each with a few defects mixed in."""
    views = [
        View(
            draw(st.sampled_from(REAL * 2 + DTYPES[len(REAL) :])),
            draw(st.integers(1, 4)),
            draw(st.sampled_from(["ok"] * 8 + ["1d", "3d", "short"])),
            draw(st.sampled_from([1.0] * 4 + [1e6, 1e200, 1e307])),
            draw(st.sampled_from([None] * 6 + [math.nan, math.inf, -math.inf])),
        )
        for _ in range(draw(st.integers(1, 3)))
    ]
    return Case(
        draw(st.integers(2, 60)),
        draw(st.sampled_from(LABEL_SETS)),
        draw(st.sampled_from(["int"] * 3 + ["float", "fractional"])),
        views,
        draw(st.integers(0, 2**16)),
    )


@pytest.fixture(autouse=True)
def no_full_error(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)


def check(case: Case, path: Path, code: int, stderr: str, out: Path, hydra_files=frozenset()) -> None:
    """Trained normally, or one error line naming the file with exit 1 and no outputs; and as predicted."""
    lines = stderr.strip().splitlines()
    if code == 0:
        metrics = json.loads((out / "metrics.json").read_text())
        assert math.isfinite(metrics["test/nll"]) and (out / "predictions.npz").is_file()
        assert not case.must_fail(), case
    else:
        assert code == 1 and len(lines) == 1 and lines[0].startswith(f"error: {path}"), (case, stderr)
        left = {p.name for p in out.iterdir()} if out.exists() else set()
        assert left <= hydra_files, (case, left)
        assert not case.must_train(), (case, lines)


def run_in_process(path: Path, out: Path) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            run_guarded(train, compose_train(out, [*ARGS, f"dataset.path={path}"]))
            code = 0
        except SystemExit as e:
            code = e.code
    return code, err.getvalue()


@pytest.mark.slow
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(case=cases())
@example(case=Case(60, (0, 5, 10**9), "int", [View("float64", 3), View("bool", 2)]))  # every dtype at least once
@example(case=Case(45, (1, 2, 3), "float", [View("int64", 2), View("uint8", 1)]))
@example(case=Case(30, (0, 1, 2), "int", [View("complex128", 2)]))
@example(case=Case(30, (0, 1, 2), "int", [View("float64", 2), View("object", 2)]))
@example(case=Case(30, (0, 1, 2), "int", [View("float32", 2, special=math.nan), View("str", 1)]))
def test_fuzz_custom_data_trains_or_fails_in_one_line(case, one_thread):  # one_thread: the same for every example
    with tempfile.TemporaryDirectory() as d:
        path, out = Path(d) / "data.npz", Path(d) / "run"
        np.savez(path, **case.arrays())
        code, stderr = run_in_process(path, out)
        event("trained" if code == 0 else stderr.strip().split(": ", 2)[-1][:40])  # --hypothesis-show-statistics
        check(case, path, code, stderr, out)


@pytest.mark.parametrize(
    "case",
    [
        Case(60, (0, 7, 10**9), "float", [View("uint8", 3), View("bool", 2), View("float32", 1, scale=1e6)], seed=1),
        Case(30, (1, 2), "int", [View("float64", 3), View("str", 2)], seed=2),
    ],
    ids=["trains", "fails"],
)
@pytest.mark.slow
def test_fuzz_examples_through_real_cli(tmp_path, case):
    path, run_dir = tmp_path / "data.npz", tmp_path / "run"
    np.savez(path, **case.arrays())
    r = run_cli(["train.py", *ARGS, f"dataset.path={path}", f"hydra.run.dir={run_dir}", "logger=none"])
    check(case, path, r.returncode, r.stderr if r.returncode else "", run_dir, {".hydra", "train.log"})
    assert (r.returncode == 0) == case.must_train()
