"""Deflate bombs for the .npz reader's tests: an array of zeros that is small on disk (about 1/1000 of
its size) but inflates to its full size; built without compressing gigabytes."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

import numpy as np

BLOCK = 1 << 20


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def deflate_bomb(path, rows: int, declared_rows: int | None = None, **arrays) -> None:
    """An .npz whose ``x1`` is a (rows, 1) float64 array of zeros (the .npy header may declare
    ``declared_rows`` instead), stored as one real deflate stream with a correct CRC, followed by the
    ``arrays`` written normally. One 1 MiB block of zeros is compressed once (after a full flush the
    compressor's state is the same, so every further block compresses to the same bytes) and repeated."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<f8", "fortran_order": False, "shape": (declared_rows or rows, 1)}
    )
    header, size = buf.getvalue(), rows * 8
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = co.compress(header) + co.flush(zlib.Z_FULL_FLUSH)
    block = co.compress(bytes(BLOCK)) + co.flush(zlib.Z_FULL_FLUSH)
    n_blocks, rest = divmod(size, BLOCK)
    tail = co.compress(bytes(rest)) + co.flush()
    crc = zlib.crc32(header)
    zeros = bytes(BLOCK)
    for _ in range(n_blocks):
        crc = zlib.crc32(zeros, crc)
    crc = zlib.crc32(bytes(rest), crc)
    inflated, name = len(header) + size, b"x1.npy"
    deflated = len(head) + n_blocks * len(block) + len(tail)
    assert inflated < 1 << 32, "no zip64: keep the bomb under 4 GiB"
    date = (2020 - 1980) << 9 | 1 << 5 | 1
    with open(path, "wb") as f:
        f.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, date, crc, deflated, inflated, len(name), 0))
        f.write(name + head)
        for _ in range(n_blocks):
            f.write(block)
        f.write(tail)
        cd_offset = f.tell()
        f.write(
            struct.pack(
                "<4s4B4H3L5H2L",
                b"PK\x01\x02",
                20,
                3,
                20,
                0,
                0,
                8,
                0,
                date,
                crc,
                deflated,
                inflated,
                len(name),
                0,
                0,
                0,
                0,
                0o644 << 16,
                0,
            )
            + name
        )
        cd_size = f.tell() - cd_offset
        f.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, cd_size, cd_offset, 0))
    with zipfile.ZipFile(path, "a") as zf:
        for key, a in arrays.items():
            zf.writestr(f"{key}.npy", npy_bytes(np.asarray(a)))
