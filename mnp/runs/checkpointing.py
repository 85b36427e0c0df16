"""Checkpoints and run directories that survive crashes: atomic writes (the replaced ``last.ckpt`` stays as
``prev.ckpt`` while its successor is written), ``weights_only`` loads that fail in one clear line, one process
per run directory, and a ``csv/metrics.csv`` that keeps every epoch across resumes."""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import pickle
import re
import tempfile
import time
import zipfile
from pathlib import Path

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import ModelCheckpoint

from datamodules.files import TEMP, atomic_write

log = logging.getLogger(__name__)

CFG_KEY = "mnp_cfg"  # resolved config stored inside every checkpoint (plain containers)
PREP_KEY = "mnp_preprocessing"  # the data's fitted scalers and label map (mnp.cli.predictor)
ELAPSED_KEY = "elapsed_s"  # the run's wall time up to the checkpoint, over all its sessions
LAST, PREVIOUS = "last.ckpt", "prev.ckpt"
LOCK = ".lock"


def check_writable(out_dir: Path, key: str = "paths.log_dir or hydra.run.dir") -> None:
    """A PermissionError naming ``out_dir`` and the ``key`` that moves it, when no file can be written there."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out_dir).close()  # no fixed name: parallel runs never collide
    except OSError as e:
        raise PermissionError(
            f"output directory {out_dir} is not writable ({e.strerror}); set {key} to a writable place"
        ) from None


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``CheckpointIO`` with atomic saves and ``weights_only=True`` loads. A replaced ``last.ckpt``
    of this run (written here, or ``resumed_from``; not a stale one of a fresh start) stays as ``prev.ckpt``
    until the new one is in place (written, fsynced, renamed, the directory fsynced); then ``prev.ckpt`` goes, so
    a run keeps one checkpoint on disk, not two. Where a crash in that window left a damaged ``last.ckpt``,
    :func:`resume_checkpoint` resumes from ``prev.ckpt``."""

    def __init__(self, resumed_from: str | None = None, ckpt_dir: Path | None = None):
        self.ours = {str(Path(resumed_from).resolve())} if resumed_from else set()
        self.ckpt_dir = ckpt_dir  # the only folder a restored callback state may name (None: no folder)

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        path = Path(path).resolve()
        previous = path.with_name(PREVIOUS) if path.name == LAST and str(path) in self.ours else None
        try:
            atomic_write(path, lambda tmp: torch.save(checkpoint, tmp), previous)
        except (OSError, RuntimeError) as e:  # torch reports a full disk as a RuntimeError of its zip writer
            check_checkpoint_dir(path.parent)
            raise OSError(
                f"could not write the checkpoint {path} ({' '.join(str(e).split())[:200]}); "
                f"is the disk full? The last good checkpoint is kept in {path.parent}"
            ) from e
        self.ours.add(str(path))
        if path.name == LAST:  # also one a crash left behind: a good last.ckpt is now in place
            path.with_name(PREVIOUS).unlink(missing_ok=True)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        return restorable(safe_load(path, map_location), self.ckpt_dir, path)


CKPT_PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


def restorable(ckpt, ckpt_dir: Path | None, path) -> dict:
    """``ckpt`` with every file path of its ModelCheckpoint states that does not resolve to a file directly in
    ``ckpt_dir`` (symlinks and ``..`` followed) dropped, with a warning, but for a ``checkpoints/<name>`` of a run
    moved or copied since, re-pointed quietly to that file of ``ckpt_dir`` (round 5's MOVED): Lightning deletes a restored "previous
    best" (``rm -r``), so a crafted state could name any directory tree. Those are the only paths a restored
    state holds (the loops hold counters: :func:`check_loops`)."""
    if not isinstance(ckpt, dict):
        return ckpt
    inside = Path(ckpt_dir).resolve() if ckpt_dir is not None else None

    def placed(where: str, value):
        """``value`` kept, re-pointed into ``inside`` (a run moved or copied: its checkpoints/ file of that name),
        or None: dropped, with a warning."""
        if isinstance(value, str) and (value == "" or inside is not None and Path(value).resolve().parent == inside):
            return value
        if isinstance(value, str) and inside is not None and Path(value).parent.name == inside.name:
            moved = inside / Path(value).name
            if moved.is_file() and not moved.is_symlink():
                return str(moved)
        log.warning(
            "checkpoint %s: %s names %r, not a file in %s; it is not restored",
            path,
            where,
            value,
            inside or "this run's checkpoints",
        )
        return None

    for key, state in (ckpt.get("callbacks") or {}).items():
        if not (isinstance(key, str) and key.startswith("ModelCheckpoint") and isinstance(state, dict)):
            continue
        for name in CKPT_PATH_KEYS:
            if name in state:
                state[name] = placed(f"{key}.{name}", state[name]) or ""
        if "best_k_models" in state:
            models = state["best_k_models"] if isinstance(state["best_k_models"], dict) else {}
            moved = {p: placed(f"{key}.best_k_models", p) for p in models}
            state["best_k_models"] = {moved[p]: v for p, v in models.items() if moved[p]}
        if inside is not None and isinstance(state.get("dirpath"), str) and Path(state["dirpath"]).name == inside.name:
            state["dirpath"] = str(inside)  # a moved run's own folder: Lightning then warns of no changed dirpath
    check_loops(ckpt.get("loops"), path)
    return ckpt


def check_checkpoint_dir(ckpt_dir: Path) -> None:
    """One clear line when the checkpoint folder's name is taken by a file (not a full disk)."""
    if ckpt_dir.exists() and not ckpt_dir.is_dir():
        raise NotADirectoryError(
            f"{ckpt_dir} is a file, not a directory, so no checkpoint can be written there; "
            "move it away, or set callbacks.checkpoint.every_n_epochs=0 for no checkpoints"
        )


def checkpoint_callbacks(ckpt_dir: Path, monitor: str | None = None, every_n_epochs: int = 1) -> list[ModelCheckpoint]:
    """``last.ckpt`` after every ``every_n_epochs``-th training epoch (the top-1 of an unmonitored
    ModelCheckpoint: Lightning 2.6's ``save_last=True`` writes it only beside a top-k file, never with
    ``save_top_k=0``), and ``best.ckpt`` by ``monitor``. Both save after the module's ``on_train_epoch_end``
    closed its epoch timer. ``every_n_epochs`` 0: no checkpoints (a sweep that keeps only its metrics).
    A file where the folder should be stops the run here, before training."""
    if every_n_epochs == 0:
        return []
    check_checkpoint_dir(Path(ckpt_dir))  # before training
    common = dict(
        dirpath=ckpt_dir,
        save_top_k=1,
        save_on_train_epoch_end=True,
        enable_version_counter=False,
        every_n_epochs=every_n_epochs,
    )
    callbacks = [ModelCheckpoint(filename=Path(LAST).stem, monitor=None, **common)]
    if monitor:
        callbacks.append(ModelCheckpoint(filename="best", monitor=monitor, mode="min", **common))
    return callbacks


class RunTime(pl.Callback):
    """A run's wall time over all its sessions: every checkpoint stores the time so far, and a resumed run
    counts on from its checkpoint's (``time/total_s`` is then the whole run's, not the last session's)."""

    def __init__(self, start: float, resumed: dict | None = None):
        self.start = start  # time.perf_counter() when this session began
        self.before = float(resumed.get(ELAPSED_KEY, 0.0)) if resumed else 0.0  # the loaded resume checkpoint's

    def elapsed(self) -> float:
        return self.before + time.perf_counter() - self.start

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        checkpoint[ELAPSED_KEY] = self.elapsed()


# ---------------------------------------------------------------------------- reading
class CheckpointError(ValueError):
    """A file that cannot be loaded as a checkpoint."""


class UnsafeCheckpoint(CheckpointError):
    """A file whose unpickling would create other objects than tensors and plain containers (run code)."""


def describe_file(path: Path) -> str:
    """What a file that failed to load as a checkpoint is, in words."""
    data = path.read_bytes()  # an unreadable file raises its own OSError here (permissions, a disk error)
    if not data:
        return "an empty file"
    if data.startswith(b"PK\x03\x04"):
        try:
            names = zipfile.ZipFile(path).namelist()
        except zipfile.BadZipFile:
            return (
                f"a truncated or damaged zip archive ({len(data)} bytes; a checkpoint whose write was cut "
                "short, e.g. by a kill or power loss)"
            )
        if any(n.endswith("data.pkl") for n in names):
            return "a damaged PyTorch checkpoint"
        npz = names and all(n.endswith(".npy") for n in names)
        return f"a {'NumPy .npz' if npz else 'zip'} archive, not a checkpoint"
    try:
        json.loads(data)
        return "a JSON file, not a checkpoint"
    except ValueError:  # also not UTF-8
        pass
    return f"not a PyTorch checkpoint ({len(data)} bytes of unrecognised data)"


def safe_load(path, map_location="cpu"):
    """``torch.load(path, weights_only=True)``: tensors and plain containers only, so loading runs no
    code. Anything else is :class:`CheckpointError` (:class:`UnsafeCheckpoint`) saying what the file is."""
    path = Path(path)
    if path.is_dir():
        inside = next((p for p in (path / "checkpoints" / LAST, path / LAST) if p.is_file()), None)
        raise IsADirectoryError(
            f"checkpoint {path} is a directory, not a checkpoint file"
            + (f"; give ckpt_path={inside}" if inside else "")
        )
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # a file that is not a checkpoint fails in torch.load with nearly any error type
        # torch words a blocked global "Unsupported global: GLOBAL io.open" or, for a blocked module,
        # "unsupported GLOBAL posix.system whose module posix is blocked" (torch 2.14)
        unsafe = isinstance(e, pickle.UnpicklingError) and re.search(
            r"unsupported (?:global: )?GLOBAL (\S+)", str(e), re.I
        )
        if unsafe:
            raise UnsafeCheckpoint(
                f"checkpoint {path} refused: loading it would create {unsafe.group(1)}, "
                "so it could run code; only load checkpoints written by train.py"
            ) from None
        raise CheckpointError(f"checkpoint {path} cannot be read: it is {describe_file(path)}") from None


def load_checkpoint(path, map_location="cpu") -> dict:
    """:func:`safe_load` of a checkpoint with model weights."""
    ckpt = safe_load(path, map_location)
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(
            f"checkpoint {path} holds no model weights (no state_dict): it was not written by train.py"
        )
    return ckpt


def resumable(path) -> dict:
    """:func:`load_checkpoint` of a checkpoint to resume from, whose loop state is checked too."""
    ckpt = load_checkpoint(path)
    check_loops(ckpt.get("loops"), path)
    return ckpt


def resume_checkpoint(ckpt_path: str | None, out_dir: Path) -> tuple[str | None, dict | None]:
    """``(None, None)`` (fresh), or the path to resume from and its loaded contents (read once, for the checks
    before the resume): the readable given path, or for ``"last"`` this run's ``last.ckpt`` if any; one that
    cannot be read gives way to ``prev.ckpt`` with a warning (and :class:`AtomicCheckpointIO` will not move it
    over ``prev.ckpt``: it is not a checkpoint of this run)."""
    if ckpt_path in (None, "", "none", "null"):
        return None, None
    if ckpt_path != "last":
        return str(ckpt_path), resumable(ckpt_path)
    last, prev = Path(out_dir) / "checkpoints" / LAST, Path(out_dir) / "checkpoints" / PREVIOUS
    if not last.exists() and not prev.exists():
        return None, None
    try:
        return str(last), resumable(last)
    except UnsafeCheckpoint:
        raise
    except (CheckpointError, FileNotFoundError) as e:
        problem = str(e)
    try:
        ckpt = resumable(prev)
    except UnsafeCheckpoint:
        raise
    except (CheckpointError, FileNotFoundError):
        raise CheckpointError(
            f"{problem}; nor is there a readable {prev} to resume from; move {out_dir} away "
            "to start afresh, or set ckpt_path=null to overwrite it"
        ) from None
    log.warning("%s; resuming from %s (epoch %d) instead", problem, prev, int(ckpt["epoch"]))
    return str(prev), ckpt


def check_loops(loops, path) -> None:
    """Lightning's restored loop state holds counters only (nested dicts of numbers): anything else is refused."""

    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{where}.{k}")
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")
        elif not (node is None or isinstance(node, (bool, int, float))):
            raise UnsafeCheckpoint(
                f"checkpoint {path} refused: its loop state holds {type(node).__name__} {str(node)[:60]!r} "
                f"at {where}, where train.py writes counters; only load checkpoints written by train.py"
            )

    walk(loops if loops is not None else {}, "loops")


def check_epochs(ckpt_path: str, max_epochs: int, ckpt: dict | None = None) -> None:
    """One clear error, before anything is written, when a checkpoint (``ckpt``: its contents if loaded
    already) has trained more epochs than the run may (Lightning would stop inside ``fit`` with a traceback)."""
    trained = int((ckpt or load_checkpoint(ckpt_path))["epoch"]) + 1
    if trained > max_epochs:
        raise ValueError(
            f"cannot resume from {ckpt_path}: it has trained {trained} epochs, more than "
            f"trainer.max_epochs={max_epochs}; nothing was changed. Set trainer.max_epochs >= {trained} "
            "to train on, or ckpt_path=null to start afresh"
        )


def weights_diff(theirs: dict, model) -> list[str]:
    """How a checkpoint's ``state_dict`` (``theirs``) does not fit ``model``, in words (``[]``: it fits)."""
    ours = model.state_dict()
    added = set(getattr(model, "filled_on_load", ()))  # buffers newer than the checkpoint, filled on load
    return (
        [f"{k} is missing" for k in sorted(ours.keys() - theirs.keys() - added)]
        + [f"{k} is not in this model" for k in sorted(theirs.keys() - ours.keys())]
        + [
            f"{k} has shape {list(theirs[k].shape)} there, {list(ours[k].shape)} here"
            for k in sorted(ours.keys() & theirs.keys())
            if theirs[k].shape != ours[k].shape
        ]
    )


def check_fits(ckpt_path: str, model: pl.LightningModule, ckpt: dict | None = None) -> None:
    """One clear error when a checkpoint (``ckpt``: its contents if loaded already) holds the weights of another
    model, dataset or size."""
    ckpt = ckpt or load_checkpoint(ckpt_path)
    diff = weights_diff(ckpt["state_dict"], model)
    if not diff:
        return
    run = ckpt.get(CFG_KEY) or {}
    origin = f" (model {run['model'].get('name')} on dataset {run['dataset'].get('name')})" if run else ""
    more = f" and {len(diff) - 1} more differences" if len(diff) > 1 else ""
    raise ValueError(
        f"checkpoint {ckpt_path}{origin} does not fit this run's model: {diff[0]}{more}; resume "
        "from a checkpoint of the same model and dataset, or set ckpt_path=null"
    )


# ---------------------------------------------------------------------------- one process per run dir
class RunDirBusy(BlockingIOError):
    """Another process holds the run directory."""  # an OSError: the CLI's guard prints it as one line


def holds_run_dir(fn):
    """``fn(cfg)`` holding an exclusive lock on ``cfg.paths.output_dir``: a second process stops at once
    naming the PID that holds it. Under the lock, temp files of a killed run are removed."""

    @functools.wraps(fn)
    def locked(cfg, *args, **kwargs):
        out_dir = Path(cfg.paths.output_dir)
        created = not out_dir.exists()
        try:
            check_writable(out_dir)
        except PermissionError:
            if cfg.get("skip_if_done", False) and (out_dir / "metrics.json").is_file():
                return fn(cfg, *args, **kwargs)  # a finished run on a read-only dir: only read, and skipped (F04)
            raise
        fd = _lock(out_dir / LOCK)
        try:
            for stale in [*out_dir.glob(".*.tmp"), *out_dir.glob("checkpoints/.*.tmp")]:
                if TEMP.match(stale.name):
                    stale.unlink()
            return fn(cfg, *args, **kwargs)
        finally:
            (out_dir / LOCK).unlink(missing_ok=True)  # while holding it: a waiting process retries
            os.close(fd)
            if created and not any(out_dir.iterdir()):
                out_dir.rmdir()

    return locked


def _lock(path: Path) -> int:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirBusy(
                f"{path.parent} is in use by process {holder} (another run of this job); wait for "
                "it to finish or stop it, then run again"
            ) from None
        if path.exists() and os.stat(path).st_ino == os.fstat(fd).st_ino:  # else the holder removed it: retry
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            return fd
        os.close(fd)
