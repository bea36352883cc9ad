"""The flusher: uploads, generation check, deletes/renames, eviction, garbage, triggers, other processes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from datahub.errors import NotFound
from datahub.writeback import flush_workspace, workspace_dir
from datahub.writeback.chunks import file_id_of
from tests.writeback.conftest import CHUNK, LAYOUTS, Env, make_env, objects_of, write

REPO = Path(__file__).resolve().parents[2]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wait_until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def test_flush_uploads_and_propagates_renames_and_deletes(env: Env) -> None:
    ws = env.open()
    ws.mkdir("dir")
    files = {"a": os.urandom(10), "dir/b": os.urandom(3 * CHUNK + 1), "dir/c": b""}
    for path, data in files.items():
        write(ws, path, data)
    report = ws.flush()
    assert report.uploaded == 3 and report.uploaded_bytes == sum(map(len, files.values()))
    assert env.origin_files() == {k: sha(v) for k, v in files.items()}
    assert ws.dirty() == []
    origin = env.origin()
    for obj in ws.flushed_objects():
        assert origin.stat(obj.path).etag == obj.etag and obj.sha256 == sha(files[obj.path])
    ws.rename("dir", "moved")
    ws.unlink("a")
    assert ws.dirty() == ["a", "dir/b", "dir/c", "moved/b", "moved/c"]
    report = ws.flush()
    assert report.uploaded == 2 and report.deleted == 3
    assert env.origin_files() == {"moved/b": sha(files["dir/b"]), "moved/c": sha(b"")}
    assert ws.flush().uploaded == 0  # nothing left


class WriteDuringUpload:
    """A progress sink that modifies the file being flushed once its first bytes stream out."""

    def __init__(self, ws) -> None:
        self.ws, self.fired = ws, False

    def update(self, n: int = 1, nbytes: int = 0) -> None:
        if nbytes and not self.fired:
            self.fired = True
            with self.ws.open("f") as fh:
                fh.write(0, b"NEW")


def test_file_changed_during_its_upload_stays_dirty(env: Env) -> None:
    ws = env.open()
    write(ws, "f", b"old" * 3000)
    report = ws.flush(progress=WriteDuringUpload(ws))
    assert report.still_dirty == 1 and ws.dirty() == ["f"]
    assert env.origin_files() == {"f": sha(b"old" * 3000)}
    ws.flush()
    assert env.origin_files() == {"f": sha(b"NEW" + (b"old" * 3000)[3:])}
    assert ws.dirty() == []


def chunk_keys(ws, path: str) -> set[str]:
    return {key for key, _ in ws.journal_record(path)["chunks"].values()}


def test_overwritten_chunks_become_garbage_and_are_deleted(env: Env) -> None:
    ws = env.open()
    write(ws, "f", os.urandom(2 * CHUNK))
    first = chunk_keys(ws, "f")
    with ws.open("f") as fh:
        fh.write(0, b"x")
    ws.flusher.gc()
    keys = chunk_keys(ws, "f")
    assert len(keys) == 2 and len(keys & first) == 1  # only the rewritten chunk was replaced
    with ws.journal.read() as txn:
        assert txn.garbage() == []  # the replaced chunk was deleted (or its pack range given up)
    assert set(env.shared_keys()) == objects_of(ws, keys)


def test_crash_orphans_are_removed_on_reopen(env: Env) -> None:
    ws = env.open()
    fh = ws.open("f", create=True)
    fh.write(0, os.urandom(3 * CHUNK))
    fh._of._write_behind()  # uploads chunks the journal never references
    ws.files.buffer_bytes = 0  # past the RAM budget: the next write uploads and drops buffers
    fh.write(0, b"y")
    assert env.shared_keys()
    ws2 = env.crash_and_reopen(ws)
    assert env.shared_keys() == []
    with pytest.raises(NotFound):  # created but never fsynced or closed: gone, as POSIX allows
        ws2.stat("f")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_eviction_drops_clean_data_only_and_reloads_on_open(tmp_path: Path, layout: str) -> None:
    env = make_env(tmp_path, shared_bytes=10 * CHUNK, **LAYOUTS[layout])
    try:
        ws = env.open(background=False)  # no watermark-triggered flusher racing the explicit evict
        clean = {f"c{i}": os.urandom(2 * CHUNK) for i in range(4)}
        for path, data in clean.items():
            write(ws, path, data)
        ws.flush()
        write(ws, "dirty", os.urandom(3 * CHUNK))
        assert ws.flusher.used == 11 * CHUNK  # past the high watermark (95 % of 10 chunks)
        freed = ws.flusher.evict(ws.flusher.low)
        assert freed >= 3 * CHUNK and ws.flusher.used <= ws.flusher.low
        dirty_chunks = chunk_keys(ws, "dirty")
        assert {file_id_of(k) for k in dirty_chunks} == {5}  # file id 5 = "dirty"
        assert len(dirty_chunks) == 3  # dirty data is never evicted
        assert objects_of(ws, dirty_chunks) <= set(env.shared_keys())
        evicted = [p for p in clean if not ws.journal_record(p)["chunks"]]
        assert evicted
        path = evicted[0]
        with ws.open(path) as fh:  # reloads from the origin
            assert fh.read(0, 3 * CHUNK) == clean[path]
        ws.rename(evicted[-1], "renamed")  # an evicted file moves in the origin on flush
        ws.flush()
        files = env.origin_files()
        assert files["renamed"] == sha(clean[evicted[-1]]) and evicted[-1] not in files
    finally:
        env.close()


def test_high_watermark_triggers_a_background_flush(tmp_path: Path) -> None:
    env = make_env(tmp_path, shared_bytes=4 * CHUNK)
    try:
        ws = env.open()
        for i in range(3):
            write(ws, f"f{i}", os.urandom(2 * CHUNK))
        wait_until(lambda: ws.dirty() == [])
        assert len(env.origin_files()) == 3
    finally:
        env.close()


def test_periodic_flush(tmp_path: Path) -> None:
    env = make_env(tmp_path, flush_interval=0.05)
    try:
        ws = env.open()
        write(ws, "p", b"periodic")
        wait_until(lambda: ws.dirty() == [])
        assert env.origin_files() == {"p": sha(b"periodic")}
    finally:
        env.close()


def test_reopen_after_crash_flushes_acknowledged_files_in_background(env: Env) -> None:
    ws = env.open()
    write(ws, "k", b"kept")
    ws2 = env.crash_and_reopen(ws)
    wait_until(lambda: ws2.dirty() == [])
    assert env.origin_files() == {"k": sha(b"kept")}


def _flush_in_subprocess(env: Env) -> dict:
    code = (
        "import json, sys\n"
        "from datahub.config import load_config\n"
        "from datahub.storage import StoreRegistry\n"
        "from datahub.writeback import flush_workspace\n"
        "cfg = load_config(env={}, overrides=json.loads(sys.argv[1]))\n"
        "print(json.dumps(flush_workspace('ws', cfg, StoreRegistry(cfg)).to_dict()))\n"
    )
    overrides = {"home": env.config.home, "cache": {"page_size": CHUNK}}
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(overrides)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_flush_from_another_process_asks_the_owner(env: Env) -> None:
    ws = env.open()
    write(ws, "x", b"via socket")
    report = _flush_in_subprocess(env)
    assert report["uploaded"] == 1
    assert ws.dirty() == [] and env.origin_files() == {"x": sha(b"via socket")}


def test_flush_from_another_process_without_an_owner(env: Env) -> None:
    ws = env.open()
    write(ws, "y", b"offline")
    ws.abandon()  # nobody holds it now; its journal still has "y" dirty
    report = _flush_in_subprocess(env)
    assert report["uploaded"] == 1
    assert env.origin_files() == {"y": sha(b"offline")}
    assert flush_workspace("ws", env.config, env.stores).uploaded == 0
    assert (workspace_dir(env.config, "ws") / "lmdb").is_dir()


@pytest.mark.slow
def test_s3_shared_tier_and_origin_with_multipart(tmp_path: Path, s3_endpoint) -> None:
    env = make_env(tmp_path, s3_endpoint, shared_s3=True, origin_s3=True, page_size=1024**2)
    env.config.s3.multipart_threshold = 5 * 1024**2
    env.config.s3.multipart_chunk = 5 * 1024**2
    try:
        ws = env.open()
        big, small = os.urandom(12 * 1024**2 + 5), os.urandom(100_000)
        write(ws, "big.bin", big)
        write(ws, "small.bin", small)
        with ws.open("big.bin") as fh:
            assert fh.read(6 * 1024**2 - 3, 10) == big[6 * 1024**2 - 3 : 6 * 1024**2 + 7]
        ws.flush()
        assert env.origin_files() == {"big.bin": sha(big), "small.bin": sha(small)}
        assert "-" in env.origin().stat("big.bin").etag  # a multipart etag
        ws.close()
    finally:
        env.close()
