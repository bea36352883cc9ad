"""blobcas19: a local store replaces a wrong blob only while the name holds that very file
(``LocalStore.put_replacing``, used by ``blobs.BlobWriter.put``; review19a's finding, whose
race through ``store_blob`` is ``tests/storage/test_review19a.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from datahub.storage import local
from datahub.storage.local import LocalStore

KEY = "blobs/sha256/ab/cd/abcd"
WRONG, RIGHT, OTHER = b"W" * 64, b"R" * 64, b"O" * 64


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "objects")


def test_the_file_found_wrong_is_replaced(store: LocalStore) -> None:
    found = store.put(KEY, WRONG)
    info = store.put_replacing(KEY, RIGHT, len(RIGHT), found.etag)
    assert info is not None and info.etag == store.stat(KEY).etag
    assert store.read(KEY, etag=info.etag) == RIGHT
    assert not [n for n in os.listdir(store._path(KEY).parent) if n.startswith(local.TEMP_PREFIX)]


def test_a_file_replaced_since_it_was_found_is_kept(store: LocalStore) -> None:
    found = store.put(KEY, WRONG)
    theirs = store.put(KEY, OTHER)  # another writer's, after ours was found wrong
    assert store.put_replacing(KEY, RIGHT, len(RIGHT), found.etag) is None
    assert store.read(KEY, etag=theirs.etag) == OTHER  # its etag stands
    store.delete(KEY)
    assert store.put_replacing(KEY, RIGHT, len(RIGHT), found.etag) is None  # gone: nothing put
    with pytest.raises(Exception, match="not found"):
        store.stat(KEY)


def test_a_name_already_holding_the_bytes_keeps_its_etag(store: LocalStore) -> None:
    found = store.put(KEY, WRONG)
    fixed = store.put(KEY, RIGHT)
    info = store.put_replacing(KEY, RIGHT, len(RIGHT), found.etag)
    assert info is not None and info.etag == fixed.etag


def test_a_plain_put_between_the_check_and_the_exchange_goes_back(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that takes no lock (a plain ``put``) lands after the check: the file swapped
    out is not the one checked, so it goes back, keeping its inode, and nothing is put."""
    found = store.put(KEY, WRONG)
    check = local._current_etag
    plain: list = []

    def put_meanwhile(target, st, expected):
        current = check(target, st, expected)
        plain.append(store.put(KEY, OTHER))
        return current

    monkeypatch.setattr(local, "_current_etag", put_meanwhile)
    assert store.put_replacing(KEY, RIGHT, len(RIGHT), found.etag) is None
    monkeypatch.setattr(local, "_current_etag", check)
    assert store.read(KEY) == OTHER
    assert os.stat(store._path(KEY)).st_ino == int(plain[0].etag.split("-")[0], 16)
    assert not [n for n in os.listdir(store._path(KEY).parent) if n.startswith(local.TEMP_PREFIX)]
