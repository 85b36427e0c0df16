"""Guarded ``.npz`` reading: the format is recognised and every member's size and dtype are read from
the zip directory and the ``.npy`` headers before anything is decompressed, so a file that is not an
archive, an object array or a deflate bomb ends in one :class:`DataError` line, not in a full inflate.
"""

from __future__ import annotations

import io
import math
import os
import zipfile
from pathlib import Path

import numpy as np

from datamodules.errors import DataError

ACCEPTED = ".npz written by numpy.savez with x1..xM and y, or .mat in MATLAB v5 or v7.3/HDF5 format"
MEMORY_FRACTION = 0.25  # the share of the available memory a file's arrays may take (as float64)
NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def available_memory() -> int | None:
    """Bytes of memory free now (``sysconf``); None where the platform cannot tell."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def human(n: float) -> str:
    """A byte count for a message: ``4.0 GB``, ``1.6 kB``."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} bytes"


def check_format(path: Path, data: bytes) -> None:
    """A DataError unless the file's bytes ``data`` start like a zip archive (what ``numpy.savez`` writes)."""
    head = data[:6]
    if head == b"\x93NUMPY":
        raise DataError(
            f"{path}: is a single .npy array, not an .npz archive; "
            "save the arrays with numpy.savez(path, x1=..., x2=..., y=...)"
        )
    if not head.startswith(b"PK"):
        raise DataError(
            f"{path}: the format could not be recognised (not a zip archive, so not an .npz); accepted: {ACCEPTED}"
        )


def member_bytes(zf: zipfile.ZipFile, info: zipfile.ZipInfo, source: str) -> int:
    """The bytes a member takes once loaded: its inflated size, or as float64 if its header says more.
    Reads only the ``.npy`` header; object arrays raise a DataError."""
    size = info.file_size
    if not info.filename.endswith(".npy"):
        return size
    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version not in NPY_HEADER_READERS:  # 3.0 (utf-8 field names): the inflated size alone
            return size
        shape, _, dtype = NPY_HEADER_READERS[version](f)
    if dtype.hasobject:
        raise DataError(
            f"{source}: {info.filename.removesuffix('.npy')} holds Python objects (dtype object); save numeric arrays"
        )
    return max(size, math.prod(shape) * 8)


def load_npz(path: Path, data: bytes) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` ``path`` by key, parsed from its bytes ``data``, after :func:`check_format` and a
    size check: the members may take at most MEMORY_FRACTION of the memory available."""
    source = str(path)
    check_format(path, data)
    free, total = available_memory(), 0
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            total += member_bytes(zf, info, source)
            if free is not None and total > MEMORY_FRACTION * free:
                raise DataError(
                    f"{source}: loading {info.filename.removesuffix('.npy')} would take the arrays to "
                    f"{human(total)} in memory, over {MEMORY_FRACTION:.0%} of the {human(free)} "
                    "available; use a smaller file or free memory"
                )
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
