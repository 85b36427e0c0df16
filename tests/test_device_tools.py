"""The device tools run only on a GPU; what can be checked here: the job list and the log parser."""
import subprocess
import sys

from cfg_utils import ROOT

sys.path.insert(0, str(ROOT / "benchmarks" / "device"))
import step_capture  # noqa: E402


def test_step_capture_parses_the_printed_lines_into_the_json_fields():
    lines = ["x.mat: 6 samples duplicate an earlier sample",
             "handwritten: no host sync in a steady-state step",
             "handwritten: step eager 17.26 ms, one CUDA graph 2.73 ms (6.3x), parameters finite after replays: True",
             "pie: sync in the step: CUDA call synchronized",
             "pie: step eager 20.00 ms; capture failed: RuntimeError: x"]
    assert step_capture.parse(lines) == {
        "handwritten": {"host_sync_free": True, "eager_ms": 17.26, "graph_ms": 2.73, "speedup": 6.32, "finite": True},
        "pie": {"host_sync_free": False, "eager_ms": 20.0}}


def test_device_jobs_run_the_fidelity_table_first_without_repeats():
    jobs = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device" / "jobs.py")], capture_output=True,
                          text=True, check=True).stdout.splitlines()
    first = {tuple(j.split()[1:4]) for j in jobs[:40]}
    assert first == {(f"model={m}", f"dataset={d}", f"seed={s}") for m in ("mnp", "mnp_official")
                     for d in ("handwritten", "cub", "pie", "scene15") for s in range(5)}
    assert len(jobs) == len(set(jobs))
