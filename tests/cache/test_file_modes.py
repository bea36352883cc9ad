"""Every file datahub writes cached or staged bytes into is readable by its owner only.

docs/cache.md, "Who may read the cache's files": page files, the disk tier's index, the
write-back journal, chunks, packs and staged files are 0600 in 0700 directories, whatever the
umask, so a second local user can neither read a cached page nor list a cache directory. Each
file class is checked after a real write path: a FUSE mount's read, a fetch worker's fill, a
workspace's write and flush, a catalog commit. A second uid is a real one (``setpriv`` to
nobody), on a cache whose parent directories it may traverse, or the test could not fail.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from datahub.cache import open_cache
from datahub.cache.disk import DiskTier
from datahub.cache.pages import PageKey
from datahub.cache.policy import make_policy
from datahub.catalog import Put, Record, open_catalog
from datahub.config import Config, load_config
from datahub.storage import StoreRegistry
from datahub.storage.base import ObjectRef
from datahub.web.images import PREVIEW_SIZES, ImageSource
from datahub.writeback.workspace import STAGING_DIR
from tests.cache.conftest import put_objects, with_cache
from tests.fuse.conftest import make_env, read_tree, sample_objects, upload_dataset
from tests.servers import S3Endpoint
from tests.writeback.conftest import make_env as make_writeback_env
from tests.writeback.conftest import write

PAGE = 64 * 1024
NOBODY = 65534


def modes(root: Path) -> dict[str, int]:
    """Relative path -> permission bits of ``root`` and every directory and regular file
    under it (sockets and the like are not data)."""
    found = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for path in root.rglob("*"):
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
            found[str(path.relative_to(root))] = stat.S_IMODE(st.st_mode)
    return found


def assert_owner_only(root: Path, *, at_least: int) -> dict[str, int]:
    """Every directory under ``root`` (itself included) 0700, every file 0600; ``root``
    holds at least ``at_least`` files (the write path under test wrote something)."""
    found = modes(root)
    files = {p: m for p, m in found.items() if (root / p).is_file()}
    wrong = {p: oct(m) for p, m in found.items() if m != (0o600 if p in files else 0o700)}
    assert wrong == {}, f"not owner-only under {root}"
    assert len(files) >= at_least, sorted(files)
    return found


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The most permissive umask: the modes must come from the code, not from the umask."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A directory every uid may traverse (pytest's own temp root is 0700, which would hide
    the cache from a second uid whatever the cache's own modes)."""
    base = Path(tempfile.mkdtemp(prefix="datahub-modes-", dir="/var/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _cache_config(home: Path, **cache: object) -> Config:
    config = load_config(env={}, overrides={"home": str(home)})
    fields = {"page_size": PAGE, "ram_bytes": 8 << 20, "disk_bytes": 64 << 20, "readahead_bytes": 0}
    return with_cache(config, **{**fields, **cache})


def _fill(config: Config, root: Path, *, fetch_workers: bool) -> int:
    """Read objects through a cache on ``config`` (from a local origin under ``root``);
    the number of pages fetched by fetch worker processes."""
    with StoreRegistry(config) as stores:
        origin = root / "origin"
        origin.mkdir()
        objects = put_objects(stores.store(origin.as_uri()), [1, 5000, PAGE, 3 * PAGE + 17], seed=5)
        with open_cache(config, stores, fetch_workers=fetch_workers) as cache:
            for ref, data in objects:
                assert cache.read(ref) == data
            return cache.stats().get("fetch_workers", {}).get("fetches", 0)


def test_page_files_written_by_a_mount_read_are_owner_only(
    tmp_path: Path, moto_endpoint: S3Endpoint, open_umask: None
) -> None:
    env = make_env(tmp_path, moto_endpoint)
    dataset = upload_dataset(env, "sample", sample_objects())
    mnt = env.mountpoint("ro")
    with env.mounted(mnt, "sample"):
        assert read_tree(mnt / "sample" / "v1") == dataset.objects
    disk = env.config.resolved_disk_dir
    found = assert_owner_only(disk, at_least=len(dataset.objects))
    assert any(p.startswith("index/") for p in found)  # the LMDB index: owner-only as well
    assert sum(p.endswith(".page") for p in found) >= len(dataset.objects)


def test_page_files_a_fetch_worker_fills_are_owner_only(tmp_path: Path, open_umask: None) -> None:
    config = _cache_config(tmp_path / "var", fetch_workers=2)
    assert _fill(config, tmp_path, fetch_workers=True) > 0  # written by the worker processes
    assert_owner_only(config.resolved_disk_dir, at_least=6)


@pytest.mark.parametrize("layout", [{}, {"writeback_pack_bytes": 0}], ids=["packs", "chunk files"])
def test_a_workspace_writes_its_journal_chunks_and_staged_files_owner_only(
    tmp_path: Path, open_umask: None, layout: dict
) -> None:
    env = make_writeback_env(tmp_path, **layout)
    try:
        ws = env.open()
        write(ws, "small.bin", os.urandom(100))  # a pack member, or a chunk file
        write(ws, "big.bin", os.urandom(3 * 4096 + 5))  # whole chunks
        with ws.open("staged.bin", create=True, truncate=True, staged=True) as fh:  # a staged write
            os.pwrite(fh.staged_fd, os.urandom(5000), 0)
        shared = Path(env.config.resolved_shared_url.removeprefix("file://"))
        staging = shared / STAGING_DIR / "ws"
        assert staging.is_dir(), sorted(modes(shared))
        assert_owner_only(staging, at_least=0)
        assert_owner_only(env.config.resolved_journal_dir / "workspaces" / "ws", at_least=2)
        chunk_files = {
            p: m for p, m in modes(shared / "writeback").items() if (shared / "writeback" / p).is_file()
        }
        assert chunk_files and set(chunk_files.values()) == {0o600}, chunk_files
        ws.close()
    finally:
        env.close()


def _commit(path: Path) -> None:
    """Create a dataset and commit a version to it (the commit takes the commit lock)."""
    catalog = open_catalog(f"sqlite:///{path}")
    try:
        catalog.create_dataset("d")
        catalog.commit("d", [Put(Record("a.bin", "s3://b/a.bin", "e1", 1))])
    finally:
        catalog.close()


def test_a_new_catalog_its_wal_and_its_commit_lock_are_owner_only(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "catalog.db"
    sqlite = open_catalog(f"sqlite:///{path}")  # held open: the -wal and -shm files stay
    try:
        _commit(path)
        names = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    finally:
        sqlite.close()
    assert {"catalog.db", "catalog.db-wal", "catalog.db-shm", "catalog.db.commit-lock"} <= set(names)
    assert set(names.values()) == {0o600}, names


def test_an_existing_catalogs_mode_is_kept_and_its_commit_lock_follows(
    tmp_path: Path, open_umask: None
) -> None:
    """A catalog its owner shared with a group stays shared: who may read it is their choice,
    and every group member who may commit must open the lock."""
    path = tmp_path / "catalog.db"
    open_catalog(f"sqlite:///{path}").close()
    os.chmod(path, 0o660)
    _commit(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o660
    assert stat.S_IMODE((tmp_path / "catalog.db.commit-lock").stat().st_mode) == 0o660


def test_making_a_new_catalog_never_closes_a_descriptor_of_it(tmp_path: Path, monkeypatch) -> None:
    """Closing any descriptor of the database file drops every POSIX lock the process holds on
    it, SQLite's WAL locks included: a thread that made the new file and closed it after
    another thread of the process had opened the catalog (the file existed by then) dropped
    that thread's locks. So the file is made under another name and linked into place."""
    from datahub import sqlite_pool

    path = tmp_path / "catalog.db"
    closed_of_catalog: list[int] = []  # descriptors closed while the catalog's name was theirs
    real_close = os.close

    def watched_close(fd: int) -> None:
        st = os.fstat(fd)
        with contextlib.suppress(FileNotFoundError):
            named = path.stat()
            if (named.st_dev, named.st_ino) == (st.st_dev, st.st_ino):
                closed_of_catalog.append(fd)
        real_close(fd)

    monkeypatch.setattr(sqlite_pool.os, "close", watched_close)
    assert sqlite_pool.create_private(path) == 0o600
    monkeypatch.undo()
    assert closed_of_catalog == []
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["catalog.db"]  # no staged name left


def test_a_disk_tier_an_earlier_version_left_open_is_tightened_when_it_opens(tmp_path: Path) -> None:
    directory = tmp_path / "disk"
    tier = DiskTier(directory, 1 << 20, make_policy("lru", 1 << 20))
    keys = [PageKey(f"file:///o/{i}", "e", PAGE, 0) for i in range(3)]
    for key in keys:
        tier.put(key, os.urandom(100))
    tier.close()
    for path in [directory, *directory.rglob("*")]:  # what an earlier version left
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    tier = DiskTier(directory, 1 << 20, make_policy("lru", 1 << 20))
    try:
        found = modes(directory)
        pages = {p: m for p, m in found.items() if p.endswith(".page")}
        assert len(pages) == len(keys) and set(pages.values()) == {0o600}, pages
        dirs = {p: m for p, m in found.items() if (directory / p).is_dir()}
        assert set(dirs.values()) == {0o700}, dirs
        assert all(tier.get(key) is not None for key in keys)  # still served
    finally:
        tier.close()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to be nobody")
def test_a_second_uid_can_neither_read_a_page_file_nor_list_the_cache(
    reachable: Path, open_umask: None
) -> None:
    config = _cache_config(reachable / "var")
    _fill(config, reachable, fetch_workers=False)
    disk = config.resolved_disk_dir
    page = next((disk / "pages").rglob("*.page"))

    def as_nobody(*cmd: str) -> subprocess.CompletedProcess:
        setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        return subprocess.run([*setpriv, *cmd], capture_output=True, timeout=60)

    assert as_nobody("ls", str(reachable)).returncode == 0  # the test's own premise: reachable
    for cmd in (["cat", str(page)], ["ls", str(disk)], ["ls", str(disk / "pages")]):
        result = as_nobody(*cmd)
        assert result.returncode != 0 and b"Permission denied" in result.stderr, (cmd, result)


def test_a_local_shared_tier_keeps_its_pages_owner_only(tmp_path: Path, open_umask: None) -> None:
    """A ``file://`` shared tier (``cache.shared_url``; the write-back's default) holds pages
    of every dataset: its objects are 0600, where a plain local object store's are 0644."""
    config = load_config(env={}, overrides={"home": str(tmp_path / "var")})
    stores = StoreRegistry(config)
    try:
        shared = stores.shared_store((tmp_path / "shared").as_uri())
        shared.put("pages/ab/page-1", b"cached bytes")
        assert stat.S_IMODE(os.stat(tmp_path / "shared" / "pages" / "ab" / "page-1").st_mode) == 0o600
        assert stat.S_IMODE(os.stat(tmp_path / "shared" / "pages" / "ab").st_mode) == 0o700
        plain = stores.store((tmp_path / "objects").as_uri())
        plain.put("a.txt", b"an object")
        assert stat.S_IMODE(os.stat(tmp_path / "objects" / "a.txt").st_mode) == 0o644
    finally:
        stores.close()


def test_image_previews_are_owner_only(tmp_path: Path, open_umask: None) -> None:
    """LabelX's and the browser's previews are decoded dataset images: 0600 in a 0700
    directory, as the cache's pages."""
    config = load_config(env={}, overrides={"home": str(tmp_path / "var")})
    stores = StoreRegistry(config)
    try:
        origin = stores.store((tmp_path / "origin").as_uri())
        image = io.BytesIO()
        Image.new("RGB", (64, 48), "red").save(image, "JPEG")
        info = origin.put("img.jpg", image.getvalue())
        ref = ObjectRef(origin.url_for("img.jpg"), info.etag, info.size)
        previews = ImageSource(tmp_path / "previews", stores=stores)
        for kind in PREVIEW_SIZES:
            assert previews.preview(ref, kind)[:2] == b"\xff\xd8"  # a JPEG
        assert_owner_only(tmp_path / "previews", at_least=len(PREVIEW_SIZES))
    finally:
        stores.close()
