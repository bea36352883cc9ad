"""Concurrent commits to one SQLite catalog take turns (issue 24 item 3).

A commit reads its changes inside its write transaction, so a long one (a 59 MB body) holds
SQLite's write lock for a long time. Others must wait their turn and succeed, never fail
with ``conflict`` after the busy timeout; a full queue, or a turn held too long by another
process, is ``busy`` (503 + Retry-After) with nothing written. Behaviour only: a small
``busy_timeout_ms`` stands in for "a commit longer than the timeout".
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from datahub.api_client import ApiClient
from datahub.catalog import Catalog, Put
from datahub.catalog.sqlite_gate import CommitGate
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import Busy
from tests.catalog.conftest import rec

GUARD = 60.0  # a hang guard, never a timing goal


def _catalog(tmp_path: Path, **options) -> Catalog:
    catalog = Catalog(SQLiteCatalogStore(tmp_path / "catalog.db", busy_timeout_ms=50, **options))
    catalog.create_dataset("ds")
    return catalog


def _held(first: str, release: threading.Event, started: threading.Event) -> Iterator[Put]:
    """A change set that stops after its first change until ``release``: a commit that keeps
    the write transaction open far longer than the busy timeout."""
    yield Put(rec(f"{first}/0"))
    started.set()
    assert release.wait(GUARD)
    for i in range(1, 50):
        yield Put(rec(f"{first}/{i}"))


def _puts(prefix: str) -> Iterator[Put]:
    for i in range(50):
        yield Put(rec(f"{prefix}/{i}"))


def test_three_concurrent_commits_on_the_head_all_succeed_in_turn(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    release, started = threading.Event(), threading.Event()
    results: dict[str, object] = {}

    def commit(name: str, changes) -> None:
        try:
            results[name] = catalog.commit("ds", changes, message=name).seq
        except Exception as exc:
            results[name] = exc

    long = threading.Thread(target=commit, args=("a", _held("a", release, started)))
    long.start()
    assert started.wait(GUARD)  # a's transaction is open
    others = [threading.Thread(target=commit, args=(n, _puts(n))) for n in "bc"]
    for t in others:
        t.start()
    for t in others:
        t.join(0.5)  # 10x the busy timeout: without turns, both have given up by now
    release.set()
    for t in (long, *others):
        t.join(GUARD)
    assert sorted(results.values()) == [1, 2, 3], results  # every one committed, none refused
    assert catalog.store._gate.queued == 0
    head = catalog.store.head("ds")
    keys = [r.key for r in catalog.store.list_records("ds", head)]
    assert len(keys) == 150 and {k.split("/")[0] for k in keys} == {"a", "b", "c"}
    catalog.close()


def test_a_full_queue_is_busy_at_once_with_nothing_written(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path)
    catalog.store._gate.max_queued = 1
    release, started = threading.Event(), threading.Event()
    waiting = threading.Event()
    seqs: list[int] = []
    long = threading.Thread(
        target=lambda: seqs.append(catalog.commit("ds", _held("a", release, started)).seq)
    )
    long.start()
    assert started.wait(GUARD)

    def queued() -> None:
        waiting.set()
        seqs.append(catalog.commit("ds", [Put(rec("b/0"))]).seq)

    second = threading.Thread(target=queued)
    second.start()
    assert waiting.wait(GUARD)
    while catalog.store._gate.queued < 1:  # the second is in the queue
        second.join(0.01)
    read = []

    def third() -> Iterator[Put]:
        read.append(1)
        yield Put(rec("c/0"))

    with pytest.raises(Busy) as refused:
        catalog.commit("ds", third())
    assert refused.value.http_status == 503 and refused.value.details["retry_after"] > 0
    assert "nothing was written" in refused.value.message and "'ds'" in refused.value.message
    assert read == []  # refused before a single change was read
    release.set()
    long.join(GUARD)
    second.join(GUARD)
    assert sorted(seqs) == [1, 2] and catalog.store.head("ds") == 2
    catalog.close()


def test_another_process_holding_the_turn_past_the_wait_is_busy_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    catalog = _catalog(tmp_path)
    gate: CommitGate = catalog.store._gate
    gate.max_wait = 0.3
    fd = os.open(gate.lock_path, os.O_RDWR | os.O_CREAT)  # another open file: another process's lock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(Busy):
            catalog.commit("ds", [Put(rec("x"))])
        assert catalog.store.head("ds") == 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        assert catalog.commit("ds", [Put(rec("x"))]).seq == 1  # its turn comes once it is free
    finally:
        os.close(fd)
        catalog.close()


def test_commits_of_two_processes_take_turns(tmp_path: Path) -> None:
    """A forked process (as ``serve --workers 2``) opens its own lock file: the two exclude each other."""
    gate = CommitGate(tmp_path / "lock")
    r, w = os.pipe()
    with gate.turn("first"):
        pid = os.fork()
        if pid == 0:  # child: try for the turn without waiting; never returns into pytest
            try:
                os.close(r)
                child = CommitGate(tmp_path / "lock", max_wait=0.0)
                try:
                    with child.turn("child"):
                        os.write(w, b"got")
                except Busy:
                    os.write(w, b"busy")
            except BaseException as exc:  # a forked copy of the worker must not run its tests
                os.write(w, f"child failed: {exc!r}".encode())
            finally:
                os._exit(0)
        os.close(w)
        assert os.read(r, 200) == b"busy"
        os.waitpid(pid, 0)
    os.close(r)
    with gate.turn("again"), gate.turn("nested, same thread"):  # re-entrant in a thread
        assert gate.queued == 0
    gate.close()


class _BusyOnce(BaseHTTPRequestHandler):
    """503 busy with ``Retry-After: 1`` to the first request, then 200."""

    def do_GET(self) -> None:
        self.server.hits.append(self.server.clock())  # type: ignore[attr-defined]
        first = len(self.server.hits) == 1  # type: ignore[attr-defined]
        body = (
            b'{"error": {"code": "busy", "message": "the catalog is busy", "details": {"retry_after": 1}}}'
            if first
            else b'{"ok": true}'
        )
        self.send_response(503 if first else 200)
        if first:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_the_client_waits_as_long_as_retry_after_says_then_retries() -> None:
    import time

    server = ThreadingHTTPServer(("127.0.0.1", 0), _BusyOnce)
    server.hits, server.clock = [], time.monotonic  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = ApiClient(f"http://127.0.0.1:{server.server_address[1]}", backoff=0.01, attempts=3)
        assert client.json("GET", "/x", what="a read") == {"ok": True}
        client.close()
    finally:
        server.shutdown()
        server.server_close()
    first, second = server.hits  # type: ignore[attr-defined]
    assert second - first >= 1.0  # waited what the server asked, not its own 10 ms backoff


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("1", 1.0),
        (" 5 ", 5.0),
        ("99999999999999999999", "cap"),
        ("²", None),
        ("١", None),
        ("1.5", None),
        ("", None),
    ],
)
def test_retry_after_takes_ascii_seconds_and_ignores_anything_else(
    header: str, expected: float | str | None
) -> None:
    """``str.isdigit`` holds for '²' and '١' too, whose float() raised a bare ValueError out of a
    retried request (review74); a number past the cap is the cap."""
    import httpx

    from datahub.api_client import MAX_RETRY_AFTER, retry_after

    got = retry_after(httpx.Response(503, headers=[(b"Retry-After", header.encode())]))  # as sent: bytes
    assert got == (MAX_RETRY_AFTER if expected == "cap" else expected)
