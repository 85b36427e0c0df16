"""benchmarks/device/tune_studies.py, the tuning studies on a GPU machine, run small on the CPU (``--cpu``): a study
stopped inside a trial packs its records, which a fresh machine unpacks and resumes without retraining a fold."""

import csv
import json
import signal
import subprocess
import sys
import tarfile
import time

import pytest
import yaml
from cfg_utils import ROOT

sys.path.insert(0, str(ROOT / "benchmarks" / "device"))
import tune_studies  # noqa: E402

SCRIPT = str(ROOT / "benchmarks" / "device" / "tune_studies.py")


def rows(study_dir):
    text = (study_dir / "trials.csv").read_text()
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


def summary(out):
    keys = ("study", "trials_before", "trials_after", "budget", "stopped_at_deadline", "unfinished_folds", "failures")
    return [tuple(s[k] for k in keys) for s in json.loads((out / "tune_studies.json").read_text())["studies"]]


def chosen_by(out):
    return [s["chosen_by"] for s in json.loads((out / "tune_studies.json").read_text())["studies"]]


def session(tmp_path, n, records, stop_when=None):
    """One session in a fresh work dir ``w<n>``; with ``stop_when(study dir)``, SIGTERM once it holds (one worker:
    the folds run one after the other, so it is stopped at a known point, as the deadline would stop it)."""
    cmd = [sys.executable, SCRIPT, "--cpu", "--work", str(tmp_path / f"w{n}"), "--out", str(tmp_path / f"out{n}")]
    cmd += ["--records", str(records), "--deadline", "400"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    study, end = tmp_path / f"w{n}" / "tune" / "mlp_synthetic", time.monotonic() + 300
    if stop_when is not None:
        while not stop_when(study) and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, output[-3000:]
    tune_studies.main(["--unpack", str(tmp_path / f"out{n}" / "tune_studies.tgz"), "--records", str(records)])
    return study


def pending(records):
    path = records / "mlp_synthetic" / tune_studies.PENDING
    return json.loads(path.read_text()) if path.exists() else {}


@pytest.mark.slow
def test_a_study_stopped_inside_a_trial_and_inside_its_seed_check_resumes_on_fresh_machines_without_retraining(
    tmp_path,
):
    records = tmp_path / "records"
    # 1: stopped once the second trial's first fold is done
    study = session(tmp_path, 1, records, lambda d: len(list(d.glob("*/metrics.json"))) >= 3)
    assert summary(tmp_path / "out1") == [("mlp_synthetic", 0, 1, 2, True, 1, [])]
    assert chosen_by(tmp_path / "out1") == ["the study (its seed check is unfinished: 2 fold runs to go)"]
    with tarfile.open(tmp_path / "out1" / "tune_studies.tgz") as tar:
        assert sorted(tar.getnames()) == [f"mlp_synthetic/{f}" for f in sorted(tune_studies.RECORDS)]
    ((fold, files),) = pending(records).items()
    assert "dataset.cv_fold=0," in fold and "_s0_" in fold and sorted(files) == sorted(tune_studies.FOLD_FILES)
    before = rows(study)

    # 2: its trial finishes on a fresh machine; stopped once the seed check's first run is done, inside the
    # candidate's batch (its two folds at seed 1), whose scores study.db does not hold yet
    study = session(tmp_path, 2, records, lambda d: any(d.glob("*_s1_*/metrics.json")))
    assert summary(tmp_path / "out2") == [("mlp_synthetic", 1, 2, 2, True, 1, [])]
    reused = study / fold
    assert (reused / "metrics.json").read_text() == files["metrics.json"]
    assert not (reused / "predictions.npz").exists()  # skipped as finished, not trained again
    after = rows(study)
    assert [(r["trial"], r["state"], r["requeued"]) for r in after] == [
        ("0", "complete", "False"),
        ("1", "fail", "True"),
        ("2", "complete", "False"),
    ]
    assert {**after[0], "chosen": ""} == {**before[0], "chosen": ""}
    assert after[2]["settings"] == after[1]["settings"]  # asked again, as it was
    nll = json.loads(files["metrics.json"])["val/nll"]
    assert float(after[2]["fold_scores"].split()[0]) == pytest.approx(nll, rel=1e-5)
    ((check_fold, check_files),) = pending(records).items()
    assert "_s1_" in check_fold and (study / check_fold / "predictions.npz").exists()  # trained in this session
    assert chosen_by(tmp_path / "out2") == ["the study (its seed check is unfinished: 4 fold runs to go)"]

    # 3: the seed check finishes on a fresh machine, its first run read back, not trained again
    study = session(tmp_path, 3, records)
    assert summary(tmp_path / "out3") == [("mlp_synthetic", 2, 2, 2, False, 0, [])]
    assert chosen_by(tmp_path / "out3") == ["seed check (seeds 0, 1; 2 candidates)"]
    assert (study / check_fold / "metrics.json").read_text() == check_files["metrics.json"]
    assert not (study / check_fold / "predictions.npz").exists()
    checks = [r for r in rows(study) if r["state"] == "seed check"]
    assert sorted((r["trial"], r["seed"]) for r in checks) == [("0", "1"), ("2", "1")]
    assert len(list(study.glob("*_s1_*/predictions.npz"))) == 3  # the other three runs of the check trained here
    assert not pending(records)  # nothing left unfinished
    best = yaml.safe_load((records / "mlp_synthetic" / "best.yaml").read_text())
    assert best["chosen_by"] == "seed check (seeds 0, 1; 2 candidates)" and sorted(best["fold_scores"]) == [0, 1]


def test_unpack_takes_study_records_only_and_the_device_runs_the_datasets_declared_for_it(tmp_path):
    (tmp_path / "x").write_text("x")
    with tarfile.open(tmp_path / "t.tgz", "w:gz") as tar:
        tar.add(tmp_path / "x", arcname="mnp_scene15/study.db")
        tar.add(tmp_path / "x", arcname="../evil")
    with pytest.raises(SystemExit, match=r"error: .*t.tgz holds '../evil', not a study record"):
        tune_studies.unpack(tmp_path / "t.tgz", tmp_path / "records")
    assert not (tmp_path / "records").exists()
    with pytest.raises(SystemExit, match="error: --datasets must be of handwritten, scene15"):
        tune_studies.main(["--datasets", "cub", "--work", str(tmp_path / "w")])
    assert tune_studies.declared_models() == ["etp", "tmc", "mcd", "de_lf", "sngp", "de_ef", "mgp", "mnp"]
