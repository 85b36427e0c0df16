"""logger=wandb in offline mode: one run per job of a multirun, per-epoch curves, summary metrics,
the reliability and noise images, and group / job_type / tags from conf/logger/wandb.yaml."""
from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from mnp.core.wandb_utils import summary_items

ROOT = Path(__file__).resolve().parents[1]
BLOCK, HEADER = 32768, 7  # wandb's transaction log: LevelDB-style 32 KiB blocks after a 7-byte header


def read_wandb_records(path: Path) -> list:
    """Decode an offline ``run-<id>.wandb`` file into wandb protobuf Records."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, buf, pos = [], b"", HEADER
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # block trailer
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if n == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + n], pos + 7 + n
        buf = chunk if kind == 2 else buf + chunk  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            r = pb.Record()
            r.ParseFromString(buf)
            records.append(r)
            buf = b""
    return records


def items(update) -> dict[str, object]:
    return {"/".join(u.nested_key) if u.nested_key else u.key: json.loads(u.value_json) for u in update}


def test_summary_items_keeps_finite_numbers_and_strings():
    got = summary_items({"test/acc": 0.9, "seed": 1, "model": "mnp", "x": math.nan, "flag": True, "none": None})
    assert got == {"test/acc": 0.9, "seed": 1, "model": "mnp"}


def test_offline_multirun_makes_one_run_per_job_with_summary_and_images(tmp_path):
    pytest.importorskip("wandb")
    env = dict(os.environ, WANDB_MODE="offline", WANDB_DIR=str(tmp_path / "wandb"), WANDB_SILENT="true")
    cmd = [sys.executable, "train.py", "-m", "model=mlp", "dataset=synthetic", "dataset.num_views=2", "logger=wandb",
           "trainer.max_epochs=2", "trainer.enable_progress_bar=false", f"paths.log_dir={tmp_path / 'logs'}",
           "experiment_name=wb", "seed=0,1"]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    run_ids = set()
    for seed in (0, 1):
        job = tmp_path / "logs" / "wb" / "multiruns" / f"mlp_synthetic_s{seed}_dataset.num_views=2,trainer.max_epochs=2"
        metrics = json.loads((job / "metrics.json").read_text())
        runs = list((job / "wandb").glob("offline-run-*"))
        assert len(runs) == 1, runs  # wandb.finish() after each job: a fresh run per job
        run = runs[0]
        records = read_wandb_records(next(run.glob("run-*.wandb")))
        kinds = [r.WhichOneof("record_type") for r in records]
        info = records[kinds.index("run")].run
        run_ids.add(info.run_id)
        assert info.run_group == "wb" and info.job_type == "mlp"
        assert set(info.tags) == {"mlp", "synthetic", f"seed{seed}"}
        config: dict = {}
        for r in records:
            if r.WhichOneof("record_type") == "config":
                config.update(items(r.config.update))
        assert {k: config.get(k) for k in ("experiment", "model", "dataset", "seed")} == \
            {"experiment": "wb", "model": "mlp", "dataset": "synthetic", "seed": seed}
        summary: dict = {}
        for r in records:
            if r.WhichOneof("record_type") == "summary":
                summary.update(items(r.summary.update))
        for key in ("test/acc", "test/ece", "noise/acc_mean", "time/train_epoch_s"):
            assert summary[key] == pytest.approx(metrics[key]), key
        assert summary["model"] == "mlp" and summary["seed"] == seed
        history = [items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
        assert sum("train/loss" in h for h in history) == 2  # one point per epoch
        images = {p.name.split("_")[0] for p in (run / "files" / "media" / "images" / "plots").glob("*.png")}
        assert images == {"reliability", "noise"}
        assert any(h.get("plots/reliability/_type") == "image-file" for h in history)
        assert (job / "reliability.png").is_file() and (job / "noise.png").is_file()
    assert len(run_ids) == 2
