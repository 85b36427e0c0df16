"""``csv/metrics.csv`` across resumes: Lightning's CSV writer deletes the file as it opens, and a resumed run
trains some epochs again; the history keeps every earlier epoch's row and one test row."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.loggers import CSVLogger

from datamodules.files import atomic_write


def _csv_files(loggers):
    """``(logger, metrics.csv, its header, its rows)`` of every CSVLogger whose metrics.csv exists."""
    for lg in loggers:
        path = Path(lg.log_dir) / "metrics.csv" if isinstance(lg, CSVLogger) else None
        if path is not None and path.is_file():
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                rows = list(reader)
            yield lg, path, list(reader.fieldnames or []), rows


def _write_csv(path: Path, keys: list[str], rows: list[dict]) -> None:
    def write(tmp):
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(rows)

    atomic_write(path, write)


def keep_csv_history(loggers) -> None:
    """Open each CSVLogger's writer now, putting back the ``metrics.csv`` it deletes as it opens; the
    writer then appends to it. :class:`CsvHistory` drops the rows of epochs the run trains again."""
    for lg, path, keys, rows in list(_csv_files(loggers)):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Experiment logs directory")
            writer = lg.experiment
        writer.metrics_keys = list(keys)
        _write_csv(path, keys, rows)


class CsvHistory(pl.Callback):
    """At the start of training, drop ``metrics.csv`` rows of the epochs about to be trained (all of them
    on a fresh start; after a resume, those past the checkpoint's epoch), keeping every earlier epoch. At the
    start of testing, drop the row of an earlier test pass (one whose outputs could not be written: a full
    disk), so the log holds the test row of the pass that wrote the outputs."""

    def on_train_start(self, trainer, pl_module):
        self._drop(trainer, lambda r: r.get("epoch") and float(r["epoch"]) >= trainer.current_epoch)

    def on_test_start(self, trainer, pl_module):
        self._drop(trainer, lambda r: any(v for k, v in r.items() if k and k.startswith("test/")))

    @staticmethod
    def _drop(trainer, drop) -> None:
        for _, path, keys, rows in _csv_files(trainer.loggers if trainer.is_global_zero else []):
            kept = [r for r in rows if not drop(r)]
            if len(kept) < len(rows):
                _write_csv(path, keys, kept)
