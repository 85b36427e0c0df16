"""Reliability round four (issue 30): the data a run records are the bytes it read."""

import hashlib
import logging
import shutil

import numpy as np
import pytest
import yaml
from cfg_utils import compose_train
from cli_utils import guarded_error

from datamodules.custom import CustomDataModule
from mnp.cli.pipeline import train

pytestmark = pytest.mark.usefixtures("one_thread")


def _data(path, seed):
    rng = np.random.default_rng(seed)
    y = np.arange(60) % 2
    np.savez(path, x1=rng.normal(size=(60, 3)) + y[:, None], x2=rng.normal(size=(60, 2)), y=y)
    return path


def test_a_data_file_replaced_right_after_the_read_records_the_bytes_read(tmp_path, monkeypatch, capsys):
    """N82: another process replaces the file between the read and the hash. The run records the sha256 of the
    bytes it trained on, so a later run on the new bytes is refused as other data, not skipped as done."""
    data, other = _data(tmp_path / "data.npz", 0), _data(tmp_path / "other.npz", 1)
    read = hashlib.sha256(data.read_bytes()).hexdigest()
    load = CustomDataModule.load

    def load_then_swap(self):
        raw = load(self)
        shutil.copyfile(other, self.path)  # in place, as another writer would
        return raw

    monkeypatch.setattr(CustomDataModule, "load", load_then_swap)
    overrides = ["model=mlp", "dataset=custom", f"dataset.path={data}", "trainer.max_epochs=1", "eval.noise=false"]
    train(compose_train(tmp_path / "run", overrides))
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["data_hash"]
    assert recorded == {str(data): read}
    monkeypatch.setattr(CustomDataModule, "load", load)
    line = guarded_error(train, compose_train(tmp_path / "run", overrides), capsys)
    assert line.startswith(f"error: {tmp_path / 'run'} holds a run of other data: {data} has changed since")


def test_a_symlink_loop_or_a_dangling_link_is_named_as_such(tmp_path, capsys):
    """A32: a symlink loop was reported as `loop.npz not found`."""
    loop, dangling = tmp_path / "loop.npz", tmp_path / "dangling.npz"
    loop.symlink_to(loop)
    dangling.symlink_to(tmp_path / "gone.npz")
    for path, says in (
        (loop, "a loop of symbolic links"),
        (dangling, f"a symbolic link to {tmp_path / 'gone.npz'}, which does not exist"),
    ):
        line = guarded_error(
            train, compose_train(tmp_path / "run", ["model=mlp", "dataset=custom", f"dataset.path={path}"]), capsys
        )
        assert line == f"error: {path} is {says}; point it at the data file"


def test_a_full_disk_while_writing_an_output_names_the_file(tmp_path, monkeypatch):
    """A30: `[Errno 28] No space left on device` named no file (it was predictions.npz's temp file)."""
    from mnp.runs.outputs import write_npz

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", full)
    with pytest.raises(OSError) as e:
        write_npz(tmp_path / "predictions.npz", {"a": np.zeros(3)})
    assert str(e.value) == f"[Errno 28] No space left on device: '{tmp_path / 'predictions.npz'}'"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_sweep_over_data_files_is_one_job_per_file(tmp_path):
    """N85: `-m dataset.path=a.npz,b.npz` became one job whose path was `a.npz,b.npz` (not found)."""
    from cli_utils import run_cli

    from mnp.cli.cli import quote_path_value

    a, b = _data(tmp_path / "a.npz", 0), _data(tmp_path / "b.npz", 1)
    assert quote_path_value(f"dataset.path={a},{b}") == f"dataset.path='{a},{b}'"  # one file, outside a sweep
    assert (
        quote_path_value(f"ckpt_path={tmp_path}/mlp_s0_x=1,y=2/last.ckpt", multirun=True)
        == f"ckpt_path='{tmp_path}/mlp_s0_x=1,y=2/last.ckpt'"
    )  # a run directory's name
    res = run_cli(
        [
            "train.py",
            "-m",
            "model=mlp",
            "dataset=custom",
            f"dataset.path={a},{b}",
            "trainer.max_epochs=1",
            "eval.noise=false",
            "logger=none",
            f"paths.log_dir={tmp_path / 'logs'}",
        ]
    )
    assert res.returncode == 0, res.stderr[-2000:]
    records = sorted((tmp_path / "logs").rglob("metrics.json"))
    assert len(records) == 2 and {
        yaml.safe_load((r.parent / "config.yaml").read_text())["dataset"]["path"] for r in records
    } == {str(a), str(b)}


def test_the_duplicate_check_counts_the_test_rows_equal_to_training_rows_of_the_split_drawn(tmp_path, caplog):
    """N75: 30 distinct rows × 10 copies and no split keys. The 80/20 split is drawn after the file is read,
    and every test row is a copy of a training row: the warning says so (it said 0 before the split)."""
    rng = np.random.default_rng(0)
    x1, x2, y = rng.normal(size=(30, 4)), rng.normal(size=(30, 3)), np.arange(30) % 3
    path = tmp_path / "dups.npz"
    np.savez(path, x1=np.tile(x1, (10, 1)), x2=np.tile(x2, (10, 1)), y=np.tile(y, 10))
    with caplog.at_level(logging.WARNING):
        dm = CustomDataModule(str(path))
        dm.setup()
    assert len(dm.test_y) == 60
    assert (
        f"{path}: 270 samples duplicate an earlier sample in every view (60 of the 60 test rows equal a "
        "training row, so the test scores are inflated by that leakage); they are kept"
    ) in caplog.text
