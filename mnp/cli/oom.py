"""Out of memory in one line: an allocation that fails during ``train`` or ``evaluate`` (numpy's
MemoryError, torch's CPU or CUDA allocator) becomes :class:`~mnp.cli.errors.OutOfMemory`, whose message
says what could not be allocated, the data's rows and view widths, and the config keys that set how much
memory a run takes."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from contextvars import ContextVar

from mnp.cli.errors import OutOfMemory

# torch: "DefaultCPUAllocator: can't allocate memory: ..." (CPU), "CUDA out of memory. ..." (GPU); numpy: "Unable to allocate"
_ALLOCATION = re.compile(
    r"DefaultCPUAllocator|can't allocate memory|not enough memory|out of memory|Unable to allocate", re.IGNORECASE
)
_DATA: ContextVar[list | None] = ContextVar("mnp_oom_data", default=None)
# the config keys that set a run's memory, where its model or dataset has them
MODEL_KEYS = ("encoder.d_e", "memory.size", "decoder.num_samples", "hidden", "num_inducing", "num_features", "members")
DATA_KEYS = ("batch_size", "eval_batch_size")


def allocation_failure(e: BaseException) -> str | None:
    """The allocator's words, on one line, when ``e`` is an allocation failure; else None."""
    if isinstance(e, OutOfMemory) or not (
        isinstance(e, MemoryError) or isinstance(e, RuntimeError) and _ALLOCATION.search(str(e))
    ):
        return None
    words = re.sub(r"^\[enforce fail at [^\]]*\]\s*(err == 0\.\s*)?", "", " ".join(str(e).split()))
    return words[:240] or type(e).__name__


def record_data(cfg, dm) -> None:
    """Note the run config and datamodule of the running command (``evaluate``: the checkpoint's run): an
    out-of-memory line names their sizes."""
    held = _DATA.get()
    if held is not None:
        held.append((cfg, dm))


def _dotted(node, key: str):
    """``node``'s value at the dotted ``key`` (an MNP part's setting: ``memory.size``), or None."""
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _settings(cfg) -> str:
    keys = [f"dataset.{k}={cfg.dataset[k]}" for k in DATA_KEYS if k in (cfg.get("dataset") or {})]
    keys += [f"model.{k}={value}" for k in MODEL_KEYS if (value := _dotted(cfg.get("model"), k)) is not None]
    return ", ".join(keys)


def describe(said: str, cfg, dm) -> str:
    """The out-of-memory line: what failed, the data's sizes (or its file while it loads) and what to reduce."""
    if dm is None or not hasattr(dm, "test_y"):  # the data is being read, checked or scaled
        source = (
            getattr(dm, "path", None)
            or (cfg.get("dataset") or {}).get("path")
            or (cfg.get("dataset") or {}).get("name", "the dataset")
        )
        return (
            f"out of memory while loading the data of {source} ({said}): the views are held as float64 while "
            "they are checked and scaled; use fewer rows or columns, or give the process more memory"
        )
    dims = list(dm.view_dims)
    rows = sum(len(getattr(dm, f"{s}_y", ())) for s in ("train", "val", "test"))
    wide = max(range(len(dims)), key=dims.__getitem__)
    return (
        f"out of memory ({said}) with {rows} rows and views of {dims} columns: reduce {_settings(cfg)} or the "
        f"columns of the widest view (view {wide + 1}, {dims[wide]} columns), or give the process more memory"
    )


def explains_memory(fn):
    """``fn(cfg)`` whose allocation failures raise :class:`OutOfMemory` naming the sizes (:func:`describe`);
    the sizes are those of the run config and datamodule passed to :func:`record_data` meanwhile."""

    @functools.wraps(fn)
    def wrapped(cfg, *args, **kwargs):
        held = []
        token = _DATA.set(held)
        try:
            return fn(cfg, *args, **kwargs)
        except (MemoryError, RuntimeError) as e:
            said = allocation_failure(e)
            if said is None:
                raise
            raise OutOfMemory(describe(said, *(held[-1] if held else (cfg, None)))) from e
        finally:
            _DATA.reset(token)

    return wrapped
