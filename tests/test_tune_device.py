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


@pytest.mark.slow
def test_a_study_stopped_inside_a_trial_resumes_on_a_fresh_machine_without_retraining_its_finished_fold(tmp_path):
    records, w1, w2 = tmp_path / "records", tmp_path / "w1", tmp_path / "w2"
    first = subprocess.Popen(
        [
            sys.executable,
            SCRIPT,
            "--cpu",
            "--work",
            str(w1),
            "--out",
            str(tmp_path / "out1"),
            "--records",
            str(records),
            "--deadline",
            "400",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    study = w1 / "tune" / "mlp_synthetic"
    end = time.monotonic() + 240
    # stopped once the second trial's first fold is done (one worker: its folds run one after the other), as the
    # deadline stops it, but at a known point
    while len(list(study.glob("*/metrics.json"))) < 3 and first.poll() is None and time.monotonic() < end:
        time.sleep(0.2)
    first.send_signal(signal.SIGTERM)
    output = first.communicate(timeout=120)[0]
    assert first.returncode == 0, output[-3000:]
    assert summary(tmp_path / "out1") == [("mlp_synthetic", 0, 1, 2, True, 1, [])]
    with tarfile.open(tmp_path / "out1" / "tune_studies.tgz") as tar:
        assert sorted(tar.getnames()) == [f"mlp_synthetic/{f}" for f in sorted(tune_studies.RECORDS)]
    tune_studies.main(["--unpack", str(tmp_path / "out1" / "tune_studies.tgz"), "--records", str(records)])
    ((fold, files),) = json.loads((records / "mlp_synthetic" / tune_studies.PENDING).read_text()).items()
    assert "dataset.cv_fold=0," in fold and sorted(files) == sorted(tune_studies.FOLD_FILES)
    before = rows(study)

    second = subprocess.run(
        [
            sys.executable,
            SCRIPT,
            "--cpu",
            "--work",
            str(w2),
            "--out",
            str(tmp_path / "out2"),
            "--records",
            str(records),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert summary(tmp_path / "out2") == [("mlp_synthetic", 1, 2, 2, False, 0, [])]
    reused = w2 / "tune" / "mlp_synthetic" / fold
    assert (reused / "metrics.json").read_text() == files["metrics.json"]
    assert not (reused / "predictions.npz").exists()  # skipped as finished, not trained again
    after = rows(w2 / "tune" / "mlp_synthetic")
    assert [(r["trial"], r["state"], r["requeued"]) for r in after] == [
        ("0", "complete", "False"),
        ("1", "fail", "True"),
        ("2", "complete", "False"),
    ]
    assert {**after[0], "chosen": ""} == {**before[0], "chosen": ""}
    assert after[2]["settings"] == after[1]["settings"] and after[2]["chosen"] == "True"  # asked again, as it was
    nll = json.loads(files["metrics.json"])["val/nll"]
    assert float(after[2]["fold_scores"].split()[0]) == pytest.approx(nll, rel=1e-5)
    tune_studies.main(["--unpack", str(tmp_path / "out2" / "tune_studies.tgz"), "--records", str(records)])
    assert not (records / "mlp_synthetic" / tune_studies.PENDING).exists()  # its trial finished


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
