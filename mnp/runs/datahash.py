"""The sha256 of the data files a run read (its ``data_hash`` record), and how the files differ from it now."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)


def file_sha256(path: Path) -> str:
    """:func:`datamodules.sources.file_sha256`, imported here: the data layer imports torch, which
    ``train.py --help`` (it imports this module) does without."""
    from datamodules.sources import file_sha256 as sha256

    return sha256(path)


def data_hashes(files: Iterable[Path], read: dict[str, str] | None = None) -> dict[str, str]:
    """``{absolute path: sha256}`` of the data files, in their order (the run's ``data_hash`` record): the hash
    of the bytes the datamodule parsed (``read``, its ``read_sha256``) where it has one, else of the file now."""
    read = read or {}
    return {str(Path(f).absolute()): read.get(str(Path(f).absolute())) or file_sha256(Path(f)) for f in files}


def data_change(recorded: dict | None, files: list[Path], read: dict[str, str] | None = None) -> str | None:
    """How ``files`` (a datamodule's, in order; ``read``: the hashes of the bytes it parsed, if it has) differ from
    the ``data_hash`` a run recorded: ``None`` when they are the same, or when there is nothing to compare (no
    record; a file not there to hash)."""
    if not recorded:
        return None
    if len(recorded) != len(files):
        return f"it read {len(recorded)} data files ({', '.join(recorded)}), this job reads {len(files)}"
    for (then_path, then), path in zip(recorded.items(), map(Path, files)):
        now = (read or {}).get(str(path.absolute())) or (file_sha256(path) if path.is_file() else then)
        if now != then:
            was = "" if str(path.absolute()) == then_path else f" (then {then_path})"
            return f"{path}{was} has changed since (sha256 {now[:12]}… now, {then[:12]}… when the run read it)"
    return None


def warn_if_data_changed(run_cfg, files: list[Path], ckpt_path, read: dict[str, str] | None = None) -> None:
    """evaluate.py: one warning line when the data read (``read``: their hashes) differ from those the checkpoint
    was trained on; the record then names the data evaluated."""
    changed = data_change(run_cfg.get("data_hash"), files, read)
    if changed:
        log.warning(
            "the data differ from those %s was trained on: %s; the scores are of the data as they are now",
            ckpt_path,
            changed,
        )
        run_cfg.data_hash = data_hashes(files, read)
