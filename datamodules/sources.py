"""The registry of the six feature datasets and how their files are found, downloaded and verified.

Files live in ``<data_dir>/<dataset>/<file>`` (the layout of shared/data). Public files are fetched
from raw GitHub URLs pinned to the commits of shared/data/SOURCES.md; downloads go to ``<file>.part``,
resume with an HTTP Range request and are renamed only after their sha256 matched.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from tqdm.auto import tqdm

from datamodules.checks import check_regular_file
from datamodules.errors import DataError, MissingData

log = logging.getLogger(__name__)


def github_raw(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{quote(path)}"


TMC = ("hanmenghan/TMC", "08d0ca4c4461b6de1cf73514d8c621598bc2b504", "TMC ICLR/datasets/")
RCML = ("jiajunsi/RCML", "2c7908e7364bfcc52618f7d08e6749f4cae52f1d", "data/")
PROIMP = ("XLearning-SCU/2023-IJCAI-ProImp", "769134bf1d053387db6ffbd77ece999aa4e80c95", "data/")
PDMF = ("winterant/PDMF", "62ca11737416b37144b43bbb3d8d37e3bdaad3ca", "dataset/")
TRUST = ("OverfitFlow/Trust4Conflict", "f21fae87dc7b179f62ccd32a2bac1b5c2cc8ef06", "Trust/datasets/ICLR2021 Datasets/")


@dataclass(frozen=True)
class DataFile:
    """One file: its name, sha256 (None: unknown) and public URL (None: no public source)."""

    name: str
    sha256: str | None = None
    url: str | None = None


def hosted(origin: tuple[str, str, str], name: str, sha256: str) -> DataFile:
    repo, commit, folder = origin
    return DataFile(name, sha256, github_raw(repo, commit, folder + name))


def index_pair(stem: str, train_sha: str, test_sha: str) -> tuple[DataFile, DataFile]:
    """Trust4Conflict's ``<stem>_{train,test}_idx.npy`` (0-based rows, random 80/20 split)."""
    return hosted(TRUST, f"{stem}_train_idx.npy", train_sha), hosted(TRUST, f"{stem}_test_idx.npy", test_sha)


@dataclass(frozen=True)
class DatasetSpec:
    """Expected contents (docs/method.md §4) and the files that hold them; ``files[0]`` is the default."""

    key: str
    n: int
    view_dims: tuple[int, ...]
    num_classes: int
    files: tuple[DataFile, ...]
    split_files: dict  # data file name -> (train DataFile, test DataFile)
    scaling: str = "minmax"  # the official code's feature scaling (docs/method.md §2)
    dims_verified: bool = True  # False: view dims from other code, not checked on a real file

    def file(self, name: str | None) -> DataFile:
        """The registered file ``name`` (default: the first), or an unregistered one (no checksum, no URL)."""
        if name is None:
            return self.files[0]
        return next((f for f in self.files if f.name == name), DataFile(name))


DATASETS: dict[str, DatasetSpec] = {
    s.key: s
    for s in [
        DatasetSpec(
            "handwritten",
            2000,
            (240, 76, 216, 47, 64, 6),
            10,
            (
                hosted(
                    TMC, "handwritten_6views.mat", "d731ec02aaa97cf9a5826df68b0dd1e73ba61a82ba3c8f64606ba402926c885b"
                ),
                hosted(RCML, "handwritten.mat", "8a9ad81f11c05fd7f07f1369bcbbaefc3d391bad10d3aa32366bd47d608eb05d"),
            ),
            {
                "handwritten.mat": index_pair(
                    "handwritten",
                    "8896588f1f7153743def953e22a9a5e6c3efa105fda2a29e90d1f5f8797dc8dd",
                    "260aa996449bcdb9c2b89b78daf6757e48cac7de0f97d054ef83cde31352e3b1",
                )
            },
        ),
        DatasetSpec(
            "cub",
            600,
            (1024, 300),
            10,
            (
                hosted(
                    PROIMP,
                    "cub_googlenet_doc2vec_c10.mat",
                    "3ab7dc9917c520e6931fa3338cb9c6e8b2f6a4050ca8a25c97360e87d7bbfc3a",
                ),
                hosted(
                    PDMF,
                    "CUB_c10_2views_train_test.mat",
                    "2fa9f3f4d75070470de6aeb8e91b51e825a5f3e4135c6baf943f73054ad60174",
                ),
            ),
            {
                "cub_googlenet_doc2vec_c10.mat": index_pair(
                    "cub_googlenet_doc2vec_c10",
                    "26c99e5dec5447b9a177b48ea58ae56a79621c236d88f52ddf0a2081f3cdebd0",
                    "5de1d959c36d4f73690d841a6d429dce416c9980b10f577b530ff1c867dbed2e",
                )
            },
        ),
        DatasetSpec(
            "pie",
            680,
            (484, 256, 279),
            68,
            (hosted(RCML, "PIE_face_10.mat", "7b7f5b73b140c9e00d6d9a4ed78e0292b298bd12fbcfb2c96125795c7f8150f8"),),
            {
                "PIE_face_10.mat": index_pair(
                    "PIE_face_10",
                    "42e8002ee754909a356981d7feeb5c8284fdb25acd2b07b2a421547b90762a19",
                    "508d4fceabebe57efddb3e84e53a699293860de4828c8c2edbeb424c106c95d7",
                )
            },
        ),
        DatasetSpec(
            "scene15",
            4485,
            (20, 59, 40),
            15,
            (
                hosted(RCML, "scene15_mtv.mat", "52a71c6c675d5b0c1e07189778716bc52b972b17b58d8156c01422bcce2e4442"),
                hosted(
                    PDMF,
                    "scene15_mtv_train_test.mat",
                    "446a8af636c7a26d48ad44fb2cf574fd76b1f1b72e89792f27888d61288b48ba",
                ),
            ),
            {
                "scene15_mtv.mat": index_pair(
                    "scene15_mtv",
                    "8f80a630180b22d6b8b3165c60e47869ce7a8cbd26a70678acdb6598632ed80e",
                    "dbeac6b790946229ef3980afba641ea6447ee549b11e15ac116bbb45573d0c16",
                )
            },
            scaling="standard",
        ),
        DatasetSpec(
            "caltech101",
            8677,
            (4096, 4096),
            101,
            (DataFile("2view-caltech101-8677sample.mat"),),
            {
                "2view-caltech101-8677sample.mat": index_pair(
                    "2view-caltech101-8677sample",
                    "9d8b586eb1208fadd58d47d6dddc626071c3ccb1fed2f399effba5ef1c68a93e",
                    "20e1b52d95d7c5346cdcb6030b6639f2f930769cae286c983dd1d78e61cb2fc4",
                )
            },
            "standard",
            dims_verified=False,
        ),
        DatasetSpec(
            "hmdb",
            6718,
            (1000, 1000),
            51,
            (DataFile("HMDB51_HOG_MBH.mat"),),
            {
                "HMDB51_HOG_MBH.mat": index_pair(
                    "HMDB51_HOG_MBH",
                    "b1b53f5d98359329e46d88f680fbf4c4e5f842826715ac0395b17ceb78417ba9",
                    "61cfe32a4fc5b3ba0660374be7892626e34f5a9db5286504f8f431a8399b8f46",
                )
            },
            "standard",
            dims_verified=False,
        ),
    ]
}


# ---------------------------------------------------------------------------- checksums
_verified: set[tuple] = set()  # (path, size, mtime_ns, sha256) checked in this process
_hashes: dict[tuple, str] = {}  # (path, size, mtime_ns) -> sha256, hashed in this process


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 of ``path`` as it is now, hashed at most once per (path, size, mtime) in a process; a
    ``.sha256ok`` stamp :func:`verify` left for this size and mtime is trusted, as verify trusts it.
    sha256 runs at about 1.5 GB/s here (0.2 s for 300 MB, once the file is in the page cache)."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _hashes:
        stamp = path.with_name(path.name + ".sha256ok")
        known = [v[3] for v in _verified if v[:3] == key]
        fields = stamp.read_text().split() if not known and stamp.is_file() else []
        if len(fields) == 3 and fields[:2] == [str(st.st_size), str(st.st_mtime_ns)]:
            known = [fields[2]]
        _hashes[key] = known[0] if known else sha256_of(path)
    return _hashes[key]


def verify(path: Path, sha256: str) -> None:
    """Raise :class:`DataError` unless ``path`` hashes to ``sha256``.

    A pass is remembered in-process and in ``<file>.sha256ok`` (size, mtime, hash; written only
    where the folder is writable), so unchanged files are hashed once.
    """
    key, stamp, marker = _stamp(path, sha256)
    if key in _verified or (marker.is_file() and marker.read_text().strip() == stamp):
        return
    actual = sha256_of(path)
    if actual != sha256:
        raise DataError(
            f"{path}: sha256 mismatch (expected {sha256}, got {actual}); the file is damaged or "
            "a different version: delete it to re-download, or replace it"
        )
    remember(path, sha256)


def _stamp(path: Path, sha256: str) -> tuple[tuple, str, Path]:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, sha256)
    return key, f"{st.st_size} {st.st_mtime_ns} {sha256}", path.with_name(path.name + ".sha256ok")


def remember(path: Path, sha256: str) -> None:
    """Record that ``path`` (as it is now) hashed to ``sha256``."""
    key, stamp, marker = _stamp(path, sha256)
    _verified.add(key)
    if writable(path.parent):
        try:
            marker.write_text(stamp + "\n")
        except OSError:
            pass


def writable(folder: Path) -> bool:
    """Whether files may be written in ``folder`` (or, if absent, its nearest existing parent).

    A folder whose mode grants write access to nobody counts as read-only even for root, so
    read-only data folders such as shared/data are never written into.
    """
    folder = Path(folder).absolute()
    while not folder.exists():
        folder = folder.parent
    return os.access(folder, os.W_OK) and bool(folder.stat().st_mode & 0o222)


# ---------------------------------------------------------------------------- download
def download(url: str, dest: Path, sha256: str | None, progress: bool = True, timeout: float = 60.0) -> Path:
    """Fetch ``url`` to ``dest`` via ``dest.part`` (resumed with a Range request), verify, then rename."""
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if part.exists() else 0
    total = None
    req = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            if offset and resp.status != 206:  # the server ignored the range: start over
                offset = 0
            length = resp.headers.get("Content-Length")
            total = offset + int(length) if length is not None else None
            with (
                open(part, "ab" if offset else "wb") as f,
                tqdm(
                    total=total,
                    initial=offset,
                    unit="B",
                    unit_scale=True,
                    desc=dest.name,
                    disable=not progress,
                    leave=False,
                ) as bar,
            ):
                for chunk in iter(lambda: resp.read(1 << 16), b""):
                    f.write(chunk)
                    bar.update(len(chunk))
    except urllib.error.HTTPError as e:
        if not (e.code == 416 and offset):  # 416 with a .part: it is already complete
            raise MissingData(
                f"could not download {dest.name} from {url} (HTTP {e.code} {e.reason}); "
                f"put the file in {dest.parent}/ by hand"
            ) from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        reason = " ".join(str(getattr(e, "reason", e)).split())
        raise MissingData(
            f"could not download {dest.name} from {url} ({reason}); check the network and run again "
            f"to resume, or put the file in {dest.parent}/ by hand"
        ) from None
    size = part.stat().st_size
    if total is not None and size < total:
        raise DataError(f"download of {dest.name} stopped at {size} of {total} bytes; run again to resume")
    if sha256 is not None:
        actual = sha256_of(part)
        if actual != sha256:
            part.unlink()
            raise DataError(
                f"{dest.name} downloaded from {url} has sha256 {actual}, expected {sha256}; "
                "the download was removed, run again or put the file there by hand"
            )
    os.replace(part, dest)
    if sha256 is not None:
        remember(dest, sha256)
    return dest


def local_path(data_dir: str | Path, dataset: str, name: str) -> Path:
    """Where a dataset's file lives: ``<data_dir>/<dataset>/<name>``."""
    return Path(data_dir).expanduser() / dataset / name


def fetch(
    dataset: str,
    file: DataFile,
    data_dir: str | Path,
    allow_download: bool = True,
    checksum: bool = True,
    progress: bool = True,
) -> Path:
    """The local path of ``<data_dir>/<dataset>/<file>``: verified, downloaded first if needed and possible."""
    path = local_path(data_dir, dataset, file.name)
    folder = path.parent
    check_regular_file(path)
    if path.is_file():
        if checksum and file.sha256:
            verify(path, file.sha256)
        return path
    if file.url is None:
        raise MissingData(f"{file.name} not found and it has no public source: put {file.name} in {folder}/")
    if not allow_download:
        raise MissingData(f"{file.name} not found in {folder}/; put it there or set dataset.download=true")
    if not writable(folder):
        raise MissingData(
            f"{file.name} not found in {folder}/ and that folder is not writable, so it cannot be "
            f"downloaded; set paths.data_dir (env MNP_DATA_DIR) to a writable folder or put it there"
        )
    folder.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s to %s", file.url, path)
    return download(file.url, path, file.sha256 if checksum else None, progress=progress)
