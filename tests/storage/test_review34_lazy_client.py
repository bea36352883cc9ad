"""review34: the S3 client made on first use (6dc48d59, with an endpoint URL set) is made once
per process, whole or not at all.

- many threads' first uses at once get one client (one ``Session.client`` call);
- a first creation that fails leaves nothing cached: the next use makes it, and the store
  lists;
- a fork between the store's open and the client's first use: the child makes a client of
  its own and lists, and the parent's, made after, is the parent's (never the child's, never
  one made before the fork in a child's copy).
"""

from __future__ import annotations

import threading
from pathlib import Path

import boto3
import botocore.exceptions
import pytest

from datahub.errors import InvalidInput
from datahub.storage.s3 import S3Store
from tests.cache.test_fork25 import in_child
from tests.storage.conftest import make_config


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ``Session.client`` calls of this test (an entry per call)."""
    made: list[int] = []
    real = boto3.session.Session.client

    def client(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(boto3.session.Session, "client", client)
    return made


def _store(tmp_path: Path, endpoint, name: str) -> S3Store:
    bucket = endpoint.new_bucket(name)
    store = S3Store(bucket, "p", make_config(tmp_path, endpoint).s3)
    store.put("a/one.bin", b"1" * 100)
    return store


def test_threads_first_uses_at_once_make_one_client(
    tmp_path: Path, moto_endpoint, counted: list[int]
) -> None:
    store = _store(tmp_path, moto_endpoint, "lazy-threads")
    counted.clear()  # the test's own client, which made the bucket
    try:
        assert counted == []
        start = threading.Barrier(8)
        got: list[object] = []
        listed: list[list[str]] = []

        def first_use() -> None:
            start.wait()
            got.append(store._client)
            listed.append([o.key for o in store.list("a/")])

        threads = [threading.Thread(target=first_use) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(counted) == 1
        assert len(got) == 8 and len({id(c) for c in got}) == 1
        assert listed == [["a/one.bin"]] * 8
    finally:
        store.close()


def test_a_failed_first_creation_is_not_cached(
    tmp_path: Path, moto_endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path, moto_endpoint, "lazy-error")
    real = boto3.session.Session.client
    calls: list[int] = []

    def failing_once(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:
            raise botocore.exceptions.DataNotFoundError(data_path="s3/endpoint-rule-set-1")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(boto3.session.Session, "client", failing_once)
    try:
        with pytest.raises(InvalidInput, match="invalid S3 configuration"):
            store.list("a/").__next__()
        assert store._conn._parts.get()._client is None  # nothing half made is kept
        assert [o.key for o in store.list("a/")] == ["a/one.bin"]
        assert len(calls) == 2
    finally:
        store.close()


def test_a_fork_before_the_first_use_makes_each_process_its_own_client(
    tmp_path: Path, moto_endpoint, counted: list[int]
) -> None:
    store = _store(tmp_path, moto_endpoint, "lazy-fork")
    counted.clear()  # the test's own client, which made the bucket
    try:
        assert counted == []  # opened and written, no client yet
        parents = store._conn._parts.get()

        def child() -> bool:
            listed = [o.key for o in store.list("a/")]
            mine = store._conn._parts.get()
            return listed == ["a/one.bin"] and mine is not parents and parents._client is None

        assert in_child(child) == 0
        assert parents._client is None  # the child's first use made nothing in the parent
        assert [o.key for o in store.list("a/")] == ["a/one.bin"]
        assert len(counted) == 1 and parents._client is not None

        def child_after() -> bool:  # a fork after the parent's client was made
            inherited = parents._client
            listed = [o.key for o in store.list("a/")]
            return listed == ["a/one.bin"] and store._client is not inherited

        assert in_child(child_after) == 0
        assert [o.key for o in store.list("a/")] == ["a/one.bin"]
    finally:
        store.close()
