"""Read back what an offline wandb run wrote: its ``run-<id>.wandb`` transaction log (decoded with wandb's
own protobuf records) and the table files under ``files/``. wandb 0.31 ships no Python reader for it (the
sync is in wandb-core), so the LevelDB-style framing is decoded here."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

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
        _crc, n, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if n == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + n], pos + 7 + n
        buf = chunk if kind == 2 else buf + chunk  # 1 full, 2 first, 3 middle, 4 last
        if kind in (1, 4):
            r = pb.Record()
            r.ParseFromString(buf)
            records.append(r)
            buf = b""
    return records


def items(update) -> dict[str, object]:
    """Config, summary or history items as {"a/b": value} (nested keys joined by "/")."""
    return {"/".join(u.nested_key) if u.nested_key else u.key: json.loads(u.value_json) for u in update}


@dataclass
class OfflineRun:
    """One offline run: its run record, config, summary, history rows and tables."""

    path: Path
    info: object = None
    config: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> OfflineRun:
        run = cls(path)
        for r in read_wandb_records(next(path.glob("run-*.wandb"))):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                run.info = r.run
                run.config.update(items(r.run.config.update))
            elif kind == "config":
                run.config.update(items(r.config.update))
            elif kind == "summary":
                run.summary.update(items(r.summary.update))
            elif kind == "history":
                run.history.append(items(r.history.item))
        return run

    def epochs(self, key: str) -> list:
        """``key``'s value in each per-epoch history row (Lightning's rows carry ``epoch``), None where absent."""
        return [h.get(key) for h in self.history if "epoch" in h and any(k.startswith("train/") for k in h)]

    def tables(self) -> dict[str, dict]:
        """Every logged table, by key: ``{"columns": [...], "data": [[...], ...]}``."""
        out = {}
        for h in self.history:
            for key, value in h.items():
                if key.endswith("/_type") and value == "table-file":
                    name = key[: -len("/_type")]
                    out[name] = json.loads((self.path / "files" / h[f"{name}/path"]).read_text())
        return out

    def charts(self) -> dict[str, dict]:
        """The custom charts (``wandb.plot.*``): key -> their panel config, from ``config._wandb.visualize``."""
        prefix = "_wandb/visualize/"
        return {k[len(prefix) :]: v for k, v in self.config.items() if k.startswith(prefix)}


def offline_runs(directory: Path) -> list[OfflineRun]:
    return [OfflineRun.read(p) for p in sorted(directory.glob("offline-run-*"))]
