"""fork27: stores the PARENT opened, used directly by a forked child (a DataLoader worker).

The child inherited the parent's pooled keep-alive connections (boto3's and the lean GET's):
a parent and a child reading at once sent their requests down one socket and read each
other's answers (the parent got the child's object, same length, status 200: wrong bytes),
or waited for an answer the other had read. A child now makes its own clients and pools on
first use (``datahub.procs.PerProcess``) and leaves the parent's alone. A lock of the
in-process memory store a parent thread held at the fork is not the child's either.
"""

from __future__ import annotations

import threading

import pytest

from datahub.config import load_config
from datahub.storage import StoreRegistry, drop_memory_space
from tests.cache.test_fork25 import in_child
from tests.forked import at_once, wrong_answers
from tests.servers import MotoServer

SIZE = 64 * 1024
ROUNDS = 40


@pytest.fixture(scope="module")
def keep_alive_moto():
    """moto over HTTP/1.1 keep-alive (tests/moto_http11.py): pooled connections stay open
    between requests, as on S3 and RGW (``moto_server`` closes each one)."""
    server = MotoServer(keep_alive=True)
    try:
        yield server.endpoint
    finally:
        server.stop()


@pytest.mark.parametrize("lean", [True, False], ids=["lean GET", "boto3 GET"])
def test_a_parent_and_its_child_read_their_own_objects_through_one_registry(
    keep_alive_moto, tmp_path, lean
) -> None:
    """One registry, opened and read in the parent; then the parent reads key "parent" and
    the child key "child" (as many bytes) at once. On main both used the parent's pooled
    socket: one got the other's object (or timed out waiting for an answer the other read)."""
    endpoint = keep_alive_moto
    overrides = endpoint.s3_config_overrides()
    overrides["s3"].update(read_timeout=5, max_attempts=1)  # a stolen answer fails fast
    config = load_config(env={}, overrides={"home": str(tmp_path / "var"), **overrides})
    bucket = endpoint.new_bucket("fork27")
    theirs = {"parent": b"P" * SIZE, "child": b"C" * SIZE}
    client = endpoint.client()
    for key, data in theirs.items():
        client.put_object(Bucket=bucket, Key=key, Body=data)
    registry = StoreRegistry(config, lean_s3_get=lean)
    store, _ = registry.for_url(f"s3://{bucket}/parent")
    assert store.read("parent") == theirs["parent"]  # a pooled connection is open, idle, at the fork

    def reads(key: str) -> list[str]:
        return wrong_answers(
            lambda: store.read(key),
            lambda data: None if data == theirs[key] else f"{len(data)} bytes starting {data[:4]!r}",
            ROUNDS,
        )

    def child_reads() -> bool:
        wrong = reads("child")
        for line in wrong:
            print("child:", line)
        return not wrong

    outcome, wrong = at_once(lambda: reads("parent"), child_reads)
    assert outcome == 0, f"child: {outcome} (2: a read of it failed or answered the parent's object)"
    assert not wrong, f"the parent's reads: {wrong[:3]}"
    # the child's close left the parent's pools alone, and the parent still reads
    assert store.read("parent") == theirs["parent"]
    registry.close()


def test_a_child_puts_into_a_memory_space_whose_lock_a_parent_thread_held(config) -> None:
    """A parent thread was inside a memory space's lock at the fork (a put in flight): on main
    the child's first use of the space waited for ever."""
    registry = StoreRegistry(config)
    store, _ = registry.for_url("memory://fork27mem/a")
    store.put("a", b"parent")
    space = store._space
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with space.lock:  # what a put holds while it files its bytes
            inside.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(60)

        def child() -> bool:
            store.put("b", b"child")
            return store.read("a") == b"parent" and store.read("b") == b"child"

        outcome = in_child(child, timeout=20)
    finally:
        release.set()
        holder.join(60)
    assert outcome == 0, f"child: {outcome} (hung: it waited for the parent's lock)"
    assert [i.key for i in store.list()] == ["a"]  # the child's put is the child's
    registry.close()
    drop_memory_space("fork27mem")
