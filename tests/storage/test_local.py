"""LocalStore specifics: etags without reading contents, atomic puts, and the root boundary."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.errors import Conflict, InvalidKey, ObjectChanged, ObjectNotFound
from datahub.storage import LocalStore
from datahub.storage.local import ETAG_XATTR, TEMP_PREFIX, derived_etag


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "root")


def test_put_etag_is_the_files_derived_etag_after_the_rename(store: LocalStore) -> None:
    info = store.put("a/b.bin", b"payload")
    path = store.root / "a/b.bin"
    assert info.etag == derived_etag(os.stat(path)) and info.etag.split("-")[1] == "7"
    assert ETAG_XATTR not in os.listxattr(path)  # no md5 pass, no xattr (its write moves the ctime)
    assert LocalStore(store.root).stat("a/b.bin").etag == info.etag  # a fresh store sees the same
    assert store.read("a/b.bin", etag=info.etag) == b"payload"


def test_foreign_files_get_a_derived_etag_that_changes_when_touched(store: LocalStore) -> None:
    path = store.root / "foreign.txt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"made elsewhere")
    st = os.stat(path)
    info = store.stat("foreign.txt")
    assert info.etag == derived_etag(st) and info.size == 14
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert store.stat("foreign.txt").etag != info.etag
    with pytest.raises(ObjectChanged):
        store.read("foreign.txt", etag=info.etag)


def test_a_file_rewritten_in_place_gets_another_etag(store: LocalStore) -> None:
    info = store.put("k", b"original")
    with open(store.root / "k", "r+b") as fh:  # another program edits in place
        fh.write(b"ORIG")
    now = store.stat("k")
    assert now.etag != info.etag and now.etag == derived_etag(os.stat(store.root / "k"))
    assert [i.etag for i in store.list()] == [now.etag]


def test_records_taken_before_the_ctime_field_are_checked_as_before(store: LocalStore) -> None:
    """A record's three-field etag, or the md5 an older put kept in the xattr, still reads
    while inode, size and mtime (and for the md5, the xattr's size and mtime) match, and is
    ObjectChanged once they do not; a listing names the file in the new form."""
    path = store.root / "old.bin"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"written before")
    st = os.stat(path)
    three_fields = f"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"
    assert store.read("old.bin", etag=three_fields) == b"written before"
    md5 = hashlib.md5(b"written before").hexdigest()
    os.setxattr(path, ETAG_XATTR, f"{md5} {st.st_size} {st.st_mtime_ns}".encode())  # an older put's record
    assert store.read("old.bin", 8, etag=md5) == b"before"
    assert store.stat("old.bin").etag == derived_etag(os.stat(path)) != md5
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    for etag in (three_fields, md5):
        with pytest.raises(ObjectChanged):
            store.read("old.bin", etag=etag)


def test_a_failed_put_leaves_neither_object_nor_temp_file(store: LocalStore) -> None:
    store.put("keep", b"old")

    class Broken:
        def __init__(self) -> None:
            self.calls = 0

        def read(self, n: int = -1) -> bytes:
            self.calls += 1
            if self.calls > 2:
                raise OSError("disk on fire")
            return b"x" * 1000

    with pytest.raises(Exception, match="disk on fire"):
        store.put("keep", Broken())
    with pytest.raises(Exception, match="disk on fire"):
        store.put("new/one", Broken())
    assert store.read("keep") == b"old"
    assert [p.name for p in store.root.rglob("*") if p.is_file()] == ["keep"]


def test_temp_files_are_invisible_and_their_names_reserved(store: LocalStore) -> None:
    store.put("d/visible", b"1")
    (store.root / "d" / f"{TEMP_PREFIX}abc").write_bytes(b"half written")
    assert [i.key for i in store.list()] == ["d/visible"]
    with pytest.raises(InvalidKey):
        store.put(f"d/{TEMP_PREFIX}x", b"1")


def test_nothing_escapes_the_root(tmp_path: Path, store: LocalStore) -> None:
    for key in ["../outside", "a/../../outside", "/etc/passwd", "a/./b", "a//b"]:
        with pytest.raises(InvalidKey):
            store.put(key, b"evil")
    assert not (tmp_path / "outside").exists()


def test_file_and_directory_on_one_path_is_a_conflict(store: LocalStore) -> None:
    store.put("a", b"file")
    with pytest.raises(Conflict, match="'a/b'"):
        store.put("a/b", b"under a file")
    store.put("d/x", b"1")
    with pytest.raises(Conflict):
        store.put("d", b"over a directory")
    assert store.read("a") == b"file" and store.read("d/x") == b"1"


def test_listing_skips_directories_that_cannot_match(store: LocalStore, monkeypatch) -> None:
    for key in ["a/1", "b/1", "b/2", "c/1"]:
        store.put(key, b"x")
    opened: list[str] = []
    real = os.scandir

    def spy(path):
        opened.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", spy)
    assert [i.key for i in store.list(prefix="b/", start_after="b/1")] == ["b/2"]
    assert sorted(Path(p).name for p in opened) == ["b", "root"]


def test_a_stream_keeps_the_bytes_its_etag_named_across_a_replace(store: LocalStore) -> None:
    old = store.put("s/obj", b"a" * 5000)
    stream = store.read_chunks("s/obj", 10, 4010, etag=old.etag, chunk_size=1000)
    first = next(stream)
    store.put("s/obj", b"b" * 5000)  # renames a new file over the key
    assert first + b"".join(stream) == b"a" * 4000
    with pytest.raises(ObjectChanged):
        next(store.read_chunks("s/obj", etag=old.etag))


def test_closing_a_stream_early_closes_the_file(store: LocalStore) -> None:
    info = store.put("s/big", os.urandom(100_000))
    before = len(os.listdir("/proc/self/fd"))
    stream = store.read_chunks("s/big", etag=info.etag, chunk_size=1000)
    next(stream)
    assert len(os.listdir("/proc/self/fd")) == before + 1
    stream.close()
    assert len(os.listdir("/proc/self/fd")) == before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(max_size=3000),
    start=st.integers(min_value=0, max_value=3500),
    length=st.none() | st.integers(min_value=0, max_value=3500),
)
def test_a_read_is_the_slice_of_the_file(
    store: LocalStore, data: bytes, start: int, length: int | None
) -> None:
    """One descriptor and one pread per read (not a buffered file object): the bytes are
    still exactly the slice, with or without an end, past the end included."""
    etag = store.put("k/obj.bin", data).etag
    end = None if length is None else start + length
    assert store.read("k/obj.bin", start, end, etag=etag) == data[start:end]


def test_a_read_of_a_directory_or_a_changed_file_fails_by_name(store: LocalStore) -> None:
    store.put("d/inner.bin", b"x")
    with pytest.raises(ObjectNotFound):
        store.read("d", etag="anything")  # a directory is no object, whatever etag is asked for
    info = store.put("f.bin", b"first")
    (store.root / "f.bin").write_bytes(b"second, longer")  # in place: the etag no longer matches
    with pytest.raises(ObjectChanged, match="f.bin"):
        store.read("f.bin", etag=info.etag)
