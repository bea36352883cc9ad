"""Chunk objects in a local-directory shared tier skip the md5 etag but stay durable and exact."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from datahub.errors import AccessDenied
from datahub.storage.local import ETAG_XATTR, LocalStore, derived_etag
from datahub.writeback import chunks as chunks_module
from datahub.writeback.chunks import ChunkStore, file_id_of
from tests.writeback.conftest import CHUNK, Env


def test_local_put_reports_the_derived_etag_consistently(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "root")
    info = store.put("a/b", b"x" * 1000, size=1000)
    path = tmp_path / "root" / "a" / "b"
    assert info.etag == derived_etag(os.stat(path))
    assert store.stat("a/b").etag == info.etag
    assert [i.etag for i in store.list("a/")] == [info.etag]
    assert store.read("a/b", etag=info.etag) == b"x" * 1000
    assert ETAG_XATTR not in os.listxattr(path)  # no md5 pass: puts never hash (docs/storage.md)


def test_workspace_chunks_in_a_local_shared_tier_are_not_hashed_and_read_back(unpacked_env: Env) -> None:
    env = unpacked_env
    ws = env.open()
    data = os.urandom(3 * CHUNK + 123)
    with ws.open("f", create=True) as fh:
        fh.write(0, data)
    root = Path(env.config.resolved_shared_url.removeprefix("file://"))
    keys = env.shared_keys()
    assert len(keys) == 4
    for key in keys:
        assert ETAG_XATTR not in os.listxattr(root / key)
    reopened = env.crash_and_reopen(ws)
    with reopened.open("f") as fh:
        assert fh.read(0, len(data)) == data
    reopened.flush()
    assert env.origin_files() == {"f": hashlib.sha256(data).hexdigest()}


def test_file_id_of_reads_both_key_layouts_and_rejects_others() -> None:
    assert file_id_of("writeback/ws/0/5.0.0123abcd") == 5
    assert file_id_of("writeback/w.s/1/4a7.12.0123abcd") == 0x4A7
    assert file_id_of("writeback/ws/5/0.0123abcd") == 5  # journals written before the shared directories
    assert file_id_of("writeback/ws/zz/0.0123abcd") == -1
    assert file_id_of("nochunk") == -1


def test_chunks_of_many_files_share_directories(unpacked_env: Env) -> None:
    env = unpacked_env
    ws = env.open()
    for i in range(5):
        with ws.open(f"f{i}", create=True) as fh:
            fh.write(0, b"x" * 10)
    keys = env.shared_keys()
    assert len(keys) == 5 and len({k.rsplit("/", 1)[0] for k in keys}) == 1
    assert len({file_id_of(k) for k in keys}) == 5


def test_a_refused_local_chunk_write_is_access_denied_naming_the_file(tmp_path: Path, monkeypatch) -> None:
    store = ChunkStore(LocalStore(tmp_path / "root"), "writeback/ws", "workspace 'ws'")

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(chunks_module.os, "open", refuse)
    with pytest.raises(AccessDenied) as caught:
        store.put(7, 0, b"data", "out/model.pt")
    assert "out/model.pt" in str(caught.value) and "write access" in str(caught.value)
