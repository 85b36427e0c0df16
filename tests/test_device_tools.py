"""The device tools run only on a GPU; what can be checked here: the job list and the log parser."""

import subprocess
import sys

import pytest
from cfg_utils import ROOT

sys.path.insert(0, str(ROOT / "benchmarks" / "device"))
import gpu_check  # noqa: E402
import step_capture  # noqa: E402


def test_step_capture_parses_the_printed_lines_into_the_json_fields():
    lines = [
        "x.mat: 6 samples duplicate an earlier sample",
        "handwritten: no host sync in a steady-state step",
        "handwritten: step eager 17.26 ms, one CUDA graph 2.73 ms (6.3x), parameters finite after replays: True",
        "pie: sync in the step: CUDA call synchronized",
        "pie: step eager 20.00 ms; capture failed: RuntimeError: x",
    ]
    assert step_capture.parse(lines) == {
        "handwritten": {"host_sync_free": True, "eager_ms": 17.26, "graph_ms": 2.73, "speedup": 6.32, "finite": True},
        "pie": {"host_sync_free": False, "eager_ms": 20.0},
    }


def test_device_final_jobs_cover_every_cell_seed_by_seed_without_repeats():
    jobs = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "device" / "jobs.py"), "final"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    cells = [tuple(j.split()[1:4]) for j in jobs]
    models = ("mnp", "mgp", "sngp", "etp", "mcd", "de_ef", "de_lf", "tmc", "mnp_official")
    datasets = ("handwritten", "cub", "pie", "scene15")
    assert sorted(cells) == sorted(
        (f"model={m}", f"dataset={d}", f"seed={s}") for m in models for d in datasets for s in range(10)
    )
    per_seed = len(models) * len(datasets)
    assert all(c[2] == "seed=0" for c in cells[:per_seed])  # a sweep cut short keeps whole seeds
    assert all(j.startswith("experiment=paper_main ") for j in jobs)


def test_device_selection_trains_only_the_decisions_still_open(tmp_path):
    """jobs.py select follows results/decisions/open.csv: a dataset's screen while one of its training decisions is
    open, mnp_official's runs while `configuration` is, nothing for inference-only or closed decisions."""
    import jobs

    def select(*rows):
        path = tmp_path / "open.csv"
        path.write_text("model,dataset,decision\n" + "".join(f"mnp,{d},{k}\n" for d, k in rows))
        return jobs.select_jobs(path)

    screen = select(("scene15", "modality_mask"), ("pie", "eval_samples"), ("pie", "view_weighting"))
    assert screen == [j for s in jobs.SEEDS_SELECT for j in jobs.screen_jobs("scene15", [s])]
    assert len(screen) == 5 * (1 + len(jobs.SCREENS["scene15"]))
    assert select(("handwritten", "configuration")) == [
        f"experiment=select model=mnp_official dataset=handwritten seed={s}" for s in range(5)
    ]
    assert select(("cub", "eval_samples")) == [] and jobs.select_jobs(tmp_path / "absent.csv") == []
    today = jobs.open_decisions()
    assert set(today) <= set(jobs.SCREENS) | {"cub"}  # CUB's decisions run on the CPU (benchmarks/selection/cub.sh)


def test_device_decisions_use_the_cpu_records_names_and_match_one_candidate_each():
    """decide.py names each decision as the committed records do, and each --match picks exactly its candidate."""
    import csv

    import decide
    import jobs

    for dataset, screen in jobs.SCREENS.items():
        calls = decide.decision_calls("logs/select", dataset, "x.csv", rival_ran=True)
        decided = [c[c.index("--decision") + 1] for c in calls]
        assert decided == [*screen, "configuration", "view_weighting", "eval_samples"]
        for call in calls[: len(screen)]:
            match = call[call.index("--match") + 1]
            assert [n for n, cand in screen.items() if match in cand] == [call[call.index("--decision") + 1]]
        assert "--rival" in calls[len(screen)] and "--samples" in calls[-1]
        assert "configuration" not in str(decide.decision_calls("logs/select", dataset, "x.csv", rival_ran=False))
    records = (ROOT / "results" / "decisions").glob("mnp_*.csv")
    names = {r["decision"] for path in records for r in csv.DictReader(path.open())}
    assert {n for screen in jobs.SCREENS.values() for n in screen} <= names  # the CPU's records' names


@pytest.mark.slow
def test_gpu_check_records_each_step_and_skips_what_the_deadline_leaves_no_time_for(tmp_path):
    import json
    import time

    s = gpu_check.Session(tmp_path, deadline=60)
    s.step("ok", [sys.executable, "-c", "print('hello')"], 30)
    s.step("fails", [sys.executable, "-c", "raise SystemExit(3)"], 30)
    s.step("slow", [sys.executable, "-c", "import time; time.sleep(30)"], 21)
    s.t0 = time.time() - 50  # 10 s left: below a step's minimum
    s.step("late", [sys.executable, "-c", "print(1)"], 30)
    steps = json.loads((tmp_path / "gpu_check.json").read_text())["steps"]
    assert [(e["name"], e.get("rc"), e.get("skipped")) for e in steps] == [
        ("ok", 0, None),
        ("fails", 3, None),
        ("slow", "timeout", None),
        ("late", None, True),
    ]
    assert (tmp_path / "logs" / "ok.log").read_text().strip() == "hello"


@pytest.mark.slow
def test_gpu_check_runs_compose_as_valid_train_configs(tmp_path):
    """Every whole run's overrides compose and validate (on the CPU: the emulated graph)."""
    from cfg_utils import compose_train

    from mnp.cli.validate import resolve_auto, validate

    for cpu in (False, True):
        for dataset, variant in gpu_check.ORDER:
            cfg = compose_train(tmp_path, gpu_check.run_overrides(dataset, variant, cpu))
            resolve_auto(cfg)
            validate(cfg)
            # the graph variants leave the key at its default (auto) on a GPU; eager turns it off
            assert cfg.accel.cuda_graph == (False if variant == "eager" else "emulate" if cpu else "auto")
            assert cfg.accel.matmul_precision == ("high" if variant.endswith("tf32") else "highest")
            assert cfg.eval.noise_batch_rows == (0 if variant.endswith("unbatched") else "auto")


@pytest.mark.slow
def test_graph_check_compares_captured_and_eager_training_and_passes_emulated():
    import json

    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "device" / "graph_check.py"), "--cpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"] and out["global_steps"] == [20, 20] and out["max_abs_param_diff"] == 0.0


def test_gpu_check_counts_stream_warnings_and_checks_the_step_each_run_took(tmp_path):
    """One device session verifies the new defaults: auto chose the graph in every run but the eager one,
    and no step's log holds torch's "AccumulateGrad node's stream does not match" warning."""
    s = gpu_check.Session(tmp_path, deadline=60)
    s.step("graph_check", [sys.executable, "-c", f"print({gpu_check.STREAM_WARNING!r})"], 30)
    s.record["runs"] = [{"variant": "default", "accel/step": "cuda_graph"}, {"variant": "eager", "accel/step": "eager"}]
    assert s.record["steps"][0]["stream_warnings"] == 1
    assert gpu_check.verdicts(s.record, cpu=False) == {
        "runs_took_the_expected_step": True,
        "stream_warnings": 1,
        "graph_check_ok": True,
    }
    s.record["runs"][0]["accel/step"] = "eager"  # auto fell back to eager on the GPU
    assert gpu_check.verdicts(s.record, cpu=False)["runs_took_the_expected_step"] is False
    assert gpu_check.verdicts(s.record, cpu=True)["runs_took_the_expected_step"] is False  # emulated expected
