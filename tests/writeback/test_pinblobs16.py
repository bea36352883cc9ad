"""pinblobs16: a commit pins each content as one blob, and a blob once stored is never replaced.

``commit_workspace`` pinned files eight at a time, each checking for its content-addressed
blob and putting it when absent: files of one content each put it again, and on a store
whose etag names the write (a local file's inode and ctime) every record but the last put's
named an etag the blob no longer had (review16). Now a commit pins each digest once, and
the blob write (``ObjectStore.put_once``) keeps whatever blob is there, so concurrent
commits and imports of one content agree on its etag too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.config import load_config
from datahub.errors import Conflict, ObjectChanged
from datahub.storage import StoreRegistry
from datahub.storage.local import LocalStore
from tests.servers import S3Endpoint
from tests.writeback.conftest import CHUNK, Env, write

HANG_GUARD = 120.0  # seconds: only a guard against a hang, never a measure of speed


def _unreadable(env: Env, catalog, version) -> list[str]:
    """The keys of the version whose record's etag its blob no longer has."""
    unreadable = []
    for record in catalog.list_records(version.dataset, version.seq):
        store, key = env.stores.for_url(record.url)
        try:
            data = store.read(key, etag=record.etag)
        except ObjectChanged:
            unreadable.append(record.key)
            continue
        assert len(data) == record.size, record.key
    return unreadable


# The sixteen identical files: review16's own test, tests/writeback/test_review16.py
# (test_a_commit_of_identical_files_leaves_every_record_readable), passing since this fix.


def test_empty_init_files_of_an_output_tree_are_all_readable_after_a_commit(env: Env, catalog) -> None:
    """Every Python package of an output tree has an empty ``__init__.py``: one blob (the
    digest of no bytes) for all of them, and each record reads back empty under its etag."""
    from datahub.workspaces import commit_workspace

    ws = env.open()
    for i in range(16):
        ws.mkdir(f"pkg{i}")
        write(ws, f"pkg{i}/__init__.py", b"")
        write(ws, f"pkg{i}/model.py", f"WEIGHTS = {i}\n".encode())
    version = commit_workspace(ws, catalog, "tree")
    records = list(catalog.list_records("tree", version.seq))
    assert len(records) == 32
    assert len({r.url for r in records if r.key.endswith("__init__.py")}) == 1
    assert _unreadable(env, catalog, version) == []


def test_two_workspaces_sharing_contents_commit_at_once_and_every_record_stays_readable(
    env: Env, catalog
) -> None:
    """Two workspaces holding the same 64 contents (one file each) commit at the same time
    into one objects store: each content's blob is pinned by both commits at once. Whichever
    puts it first keeps it; the other's put is dropped and its record takes the stored etag,
    so both versions read back whole (a replacing put left the first commit's records
    unreadable)."""
    from datahub.workspaces import commit_workspace

    contents = [f"shared content {n}\n".encode() * (1 + n % 50) for n in range(64)]
    workspaces = [env.open(name) for name in ("left", "right")]
    for ws in workspaces:
        for n, data in enumerate(contents):
            write(ws, f"f{n:02d}", data)
    start = threading.Barrier(len(workspaces))
    versions, errors = {}, []

    def commit(ws) -> None:
        try:
            start.wait(HANG_GUARD)
            versions[ws.name] = commit_workspace(ws, catalog, f"out-{ws.name}")
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=commit, args=(ws,)) for ws in workspaces]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_GUARD)
    assert not [t for t in threads if t.is_alive()], "a commit hung"
    assert not errors, errors
    for name, version in versions.items():
        assert _unreadable(env, catalog, version) == [], name


def test_put_once_keeps_the_first_blob_whoever_puts_it_again(tmp_path: Path) -> None:
    """Sixteen puts of one key at once on the local store: one file is created and never
    replaced, every put returns its etag (the one a stat reports), and a later put of other
    bytes keeps it too (a content-addressed name only ever holds its bytes). A directory at
    the name is a Conflict, as for ``put``."""
    store = LocalStore(tmp_path / "objects")
    start = threading.Barrier(16)
    infos, errors = [], []

    def put() -> None:
        try:
            start.wait(HANG_GUARD)
            infos.append(store.put_once("blobs/x", b"x" * 100_000, 100_000))
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_GUARD)
    assert not errors, errors
    stored = store.stat("blobs/x")
    assert {i.etag for i in infos} == {stored.etag}
    assert store.put_once("blobs/x", b"other bytes").etag == stored.etag
    assert store.read("blobs/x", etag=stored.etag) == b"x" * 100_000
    assert [p.name for p in (tmp_path / "objects" / "blobs").iterdir()] == ["x"]  # no temp file left
    (tmp_path / "objects" / "blobs" / "d").mkdir()
    with pytest.raises(Conflict):
        store.put_once("blobs/d", b"y")


@pytest.fixture
def s3_blobs_env(tmp_path: Path, moto_endpoint: S3Endpoint) -> Iterator[Env]:
    """Workspace objects and blobs in a moto S3 bucket (the shared tier stays local)."""
    bucket = moto_endpoint.new_bucket("pinblobs")
    overrides = {
        "home": str(tmp_path / "var"),
        "objects_url": f"s3://{bucket}/objects",
        "cache": {"page_size": CHUNK, "flush_interval": 3600},
        **moto_endpoint.s3_config_overrides(),
    }
    config = load_config(env={}, overrides=overrides)
    e = Env(config, StoreRegistry(config), endpoint=moto_endpoint, buckets=[bucket])
    yield e
    e.close()


def test_identical_and_empty_files_committed_through_s3_are_all_readable(s3_blobs_env: Env, catalog) -> None:
    """The same commit with the blobs in S3 (moto): one blob per content, its records read
    under their etag; the etag is the one the server reports for the blob."""
    from datahub.workspaces import commit_workspace

    env = s3_blobs_env
    ws = env.open()
    same = b"one content in every file\n" * 200
    for i in range(16):
        write(ws, f"copy{i}.txt", same)
        write(ws, f"empty{i}", b"")
    version = commit_workspace(ws, catalog, "copies")
    records = list(catalog.list_records("copies", version.seq))
    assert len(records) == 32 and all(r.url.startswith("s3://") for r in records)
    assert len({r.url for r in records}) == 2
    for record in records:
        store, key = env.stores.for_url(record.url)
        assert store.stat(key).etag == record.etag, record.key
    assert _unreadable(env, catalog, version) == []


def test_put_once_without_renameat2_links_and_keeps_the_first_blob(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where libc has no ``renameat2`` the local store takes the fallback: a hard link to the
    name (refused when it exists) then the temp name's unlink; the etag returned is the
    file's after that unlink, and a second put keeps the first file."""
    from datahub.storage import local

    monkeypatch.setattr(local, "_RENAMEAT2", None)
    store = LocalStore(tmp_path / "objects")
    first = store.put_once("blobs/y", b"y" * 5000)
    assert first.etag == store.stat("blobs/y").etag
    assert store.put_once("blobs/y", b"y" * 5000).etag == first.etag
    assert store.read("blobs/y", etag=first.etag) == b"y" * 5000
    assert [p.name for p in (tmp_path / "objects" / "blobs").iterdir()] == ["y"]
