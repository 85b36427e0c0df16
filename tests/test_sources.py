"""Registry, downloads (resume, checksum) and verification, against a local HTTP server only."""

import hashlib
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

import numpy as np
import pytest
from conftest import data_dir, data_missing

from datamodules import sources
from datamodules.errors import DataError
from datamodules.formats import read_file
from datamodules.sources import DATASETS, DataFile, download, fetch, verify

BODY = np.random.default_rng(0).bytes(200_000)
SHA = hashlib.sha256(BODY).hexdigest()


class Handler(BaseHTTPRequestHandler):
    """Serves ``server.files``; honours ``Range: bytes=N-`` unless told not to; can drop mid-body."""

    timeout = 5

    def do_GET(self):
        srv = self.server
        body = srv.files.get(self.path)
        rng = self.headers.get("Range")
        srv.requests.append((self.path, rng))
        if body is None:
            self.send_error(404)
            return
        start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1)) if rng and srv.honour_range else 0
        if start >= len(body) > 0 and rng:
            self.send_response(416)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if rng and srv.honour_range:
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        data = body[start:]
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if srv.cut_after is not None:  # simulate a dropped connection once
            data, srv.cut_after = data[: srv.cut_after], None
        srv.sent += len(data)  # counted before writing: the client may finish reading before this thread resumes
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.files, srv.requests, srv.honour_range, srv.cut_after, srv.sent = {"/f.bin": BODY}, [], True, None, 0
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    stopper = threading.Timer(60, srv.shutdown)  # never outlives a hung test
    stopper.daemon = True
    stopper.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    stopper.cancel()
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def remote(server, sha=SHA, name="f.bin"):
    return DataFile(name, sha, f"{server.url}/f.bin")


def test_fetch_downloads_verifies_renames_and_then_uses_the_local_file(server, tmp_path):
    path = fetch("ds", remote(server), tmp_path, progress=False)
    assert path == tmp_path / "ds" / "f.bin" and path.read_bytes() == BODY
    assert not (tmp_path / "ds" / "f.bin.part").exists()
    assert (tmp_path / "ds" / "f.bin.sha256ok").read_text().split()[0] == str(len(BODY))
    fetch("ds", remote(server), tmp_path, progress=False)
    assert len(server.requests) == 1


def test_resume_continues_an_existing_part_with_a_range_request(server, tmp_path):
    dest = tmp_path / "f.bin"
    (tmp_path / "f.bin.part").write_bytes(BODY[:70_000])
    download(f"{server.url}/f.bin", dest, SHA, progress=False)
    assert server.requests == [("/f.bin", "bytes=70000-")]
    assert server.sent == len(BODY) - 70_000
    assert dest.read_bytes() == BODY


def test_dropped_connection_keeps_the_part_and_the_next_call_resumes(server, tmp_path):
    dest = tmp_path / "f.bin"
    server.cut_after = 50_000
    with pytest.raises(DataError, match=r"f.bin.*(stopped at 50000 of 200000 bytes|run again to resume)"):
        download(f"{server.url}/f.bin", dest, SHA, progress=False)
    assert (tmp_path / "f.bin.part").stat().st_size == 50_000 and not dest.exists()
    download(f"{server.url}/f.bin", dest, SHA, progress=False)
    assert server.requests[-1] == ("/f.bin", "bytes=50000-")
    assert dest.read_bytes() == BODY


def test_server_ignoring_range_restarts_from_zero(server, tmp_path):
    server.honour_range = False
    (tmp_path / "f.bin.part").write_bytes(b"x" * 1000)
    download(f"{server.url}/f.bin", tmp_path / "f.bin", SHA, progress=False)
    assert (tmp_path / "f.bin").read_bytes() == BODY


def test_complete_part_answered_416_is_verified_and_renamed(server, tmp_path):
    (tmp_path / "f.bin.part").write_bytes(BODY)
    download(f"{server.url}/f.bin", tmp_path / "f.bin", SHA, progress=False)
    assert (tmp_path / "f.bin").read_bytes() == BODY


def test_downloaded_checksum_mismatch_names_file_and_hashes(server, tmp_path):
    wrong = "0" * 64
    with pytest.raises(DataError) as e:
        fetch("ds", remote(server, sha=wrong), tmp_path, progress=False)
    msg = str(e.value)
    assert "f.bin" in msg and wrong in msg and SHA in msg and "\n" not in msg
    assert not list((tmp_path / "ds").iterdir())  # neither the file nor a .part is left


def test_existing_file_checksum_mismatch(tmp_path):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "f.bin").write_bytes(b"not the file")
    with pytest.raises(DataError) as e:
        fetch("ds", DataFile("f.bin", SHA, "http://127.0.0.1:9/never"), tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "ds" / "f.bin") in msg and SHA in msg
    assert hashlib.sha256(b"not the file").hexdigest() in msg


def test_http_error_is_one_line(server, tmp_path):
    with pytest.raises(DataError, match=r"could not download g.bin .*HTTP 404"):
        download(f"{server.url}/missing", tmp_path / "g.bin", None, progress=False)


def test_verification_is_cached_until_the_file_changes(tmp_path, monkeypatch):
    f = tmp_path / "f.bin"
    f.write_bytes(BODY)
    verify(f, SHA)
    calls = []
    monkeypatch.setattr(sources, "sha256_of", lambda p: calls.append(p) or hashlib.sha256(p.read_bytes()).hexdigest())
    verify(f, SHA)  # in-process cache
    monkeypatch.setattr(sources, "_verified", set())
    verify(f, SHA)  # the .sha256ok marker
    assert calls == []
    f.write_bytes(BODY[::-1])  # a changed file is hashed again
    with pytest.raises(DataError, match="sha256 mismatch"):
        verify(f, SHA)
    assert calls == [f]


def test_data_hashes_are_computed_once_per_file_version(tmp_path, monkeypatch):
    """A run's data_hash: one sha256 per (path, size, mtime) in a process, none for a file verify() stamped."""
    f = tmp_path / "f.bin"
    f.write_bytes(BODY)
    calls = []
    monkeypatch.setattr(sources, "sha256_of", lambda p: calls.append(p) or hashlib.sha256(p.read_bytes()).hexdigest())
    assert sources.file_sha256(f) == sources.file_sha256(f) == SHA and calls == [f]
    f.write_bytes(BODY[::-1])  # changed: hashed again
    assert sources.file_sha256(f) == hashlib.sha256(BODY[::-1]).hexdigest() and calls == [f, f]
    g = tmp_path / "g.bin"
    g.write_bytes(BODY)
    verify(g, SHA)  # hashes it and leaves the .sha256ok stamp
    monkeypatch.setattr(sources, "_verified", set())
    monkeypatch.setattr(sources, "_hashes", {})
    assert sources.file_sha256(g) == SHA and calls == [f, f, g]  # the stamp, not another hash


def test_read_only_data_dir_is_never_written(server, tmp_path):
    ro = tmp_path / "ro"
    (ro / "ds").mkdir(parents=True)
    (ro / "ds" / "have.bin").write_bytes(BODY)
    ro.joinpath("ds").chmod(0o555)
    try:
        with pytest.raises(DataError, match=r"f.bin not found in .*ro/ds/ and that folder is not writable"):
            fetch("ds", remote(server), ro, progress=False)
        fetch("ds", DataFile("have.bin", SHA), ro)  # verified in memory, no marker file
        assert sorted(p.name for p in (ro / "ds").iterdir()) == ["have.bin"]
        assert server.requests == []
    finally:
        ro.joinpath("ds").chmod(0o755)


def test_missing_files_without_source_or_download_say_where_to_put_them(tmp_path):
    with pytest.raises(DataError, match=re.escape(f"put 2view-caltech101-8677sample.mat in {tmp_path}/caltech101/")):
        fetch("caltech101", DATASETS["caltech101"].file(None), tmp_path)
    with pytest.raises(
        DataError,
        match=re.escape(f"PIE_face_10.mat not found in {tmp_path}/pie/; put it there or set dataset.download=true"),
    ):
        fetch("pie", DATASETS["pie"].file(None), tmp_path, allow_download=False)


def test_a_data_file_that_is_a_fifo_is_named_as_such_before_any_download(tmp_path):
    """It was "not found" (and a sweep skipped the job as absent data); reading it would block."""
    (tmp_path / "pie").mkdir()
    os.mkfifo(tmp_path / "pie" / "PIE_face_10.mat")
    with pytest.raises(
        DataError,
        match=re.escape(f"{tmp_path}/pie/PIE_face_10.mat is a FIFO (named pipe), not a regular data file; accepted: "),
    ):
        fetch("pie", DATASETS["pie"].file(None), tmp_path)


def test_public_urls_are_raw_github_pinned_to_a_commit():
    assert DATASETS["handwritten"].files[0].url == (
        "https://raw.githubusercontent.com/hanmenghan/TMC/08d0ca4c4461b6de1cf73514d8c621598bc2b504/"
        "TMC%20ICLR/datasets/handwritten_6views.mat"
    )
    files = [f for s in DATASETS.values() for f in s.files + sum(s.split_files.values(), ())]
    public = [f for f in files if f.url]
    assert len(public) == 7 + 12  # every .mat but caltech101 and hmdb, and every index file
    for f in public:
        u = urlparse(f.url)
        owner, repo, commit, *path = u.path.lstrip("/").split("/")
        assert u.scheme == "https" and u.netloc == "raw.githubusercontent.com"
        assert re.fullmatch(r"[0-9a-f]{40}", commit) and " " not in u.path
        assert unquote("/".join(path)).endswith("/" + f.name)
        assert re.fullmatch(r"[0-9a-f]{64}", f.sha256)


@pytest.mark.parametrize("key", ["handwritten", "cub", "pie", "scene15", "caltech101", "hmdb"])
def test_registered_files_match_the_real_copies(key):
    """Each registered file under MNP_DATA_DIR has its sha256; .mat files the registered shapes,
    index pairs a disjoint cover of 0..N-1 (caltech101 and hmdb have only their index files here)."""
    spec = DATASETS[key]
    root = data_dir()
    if root is None:
        data_missing("MNP_DATA_DIR is not set")

    def present(f):
        path = root / key / f.name
        if not path.is_file():
            return None
        if f.sha256:
            verify(path, f.sha256)
        return path

    found = 0
    for f in spec.files:
        if path := present(f):
            found += 1
            raw = read_file(path)
            assert (len(raw.y), tuple(v.shape[1] for v in raw.views), len(np.unique(raw.y))) == (
                spec.n,
                spec.view_dims,
                spec.num_classes,
            )
    for pair in spec.split_files.values():
        paths = [present(f) for f in pair]
        if all(paths):
            found += 1
            tr, te = (np.load(p) for p in paths)
            np.testing.assert_array_equal(np.sort(np.concatenate([tr, te])), np.arange(spec.n))
    if not found:
        data_missing(f"no {key} file under MNP_DATA_DIR")
