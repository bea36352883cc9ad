"""The remote store's failures: a server that is down, answers garbage, or loses an answer.

Every server here is real and on 127.0.0.1: ``datahub serve`` (uvicorn) over SQLite, a tiny
HTTP server that answers garbage, and a loopback TCP proxy that forwards a commit and then
drops its answer.
"""

from __future__ import annotations

import itertools
import json
import logging
import socket
import socketserver
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from datahub.api.routes.remote import RECORDS_LINE, _ndjson
from datahub.catalog import Catalog, Put, Record, open_catalog, open_store
from datahub.catalog.http_store import DIRECTORY_HEADER, RECORDS_HEADER, HttpCatalogStore
from datahub.catalog.record_json import record_json
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.catalog.store import CatalogStore
from datahub.config import load_config
from datahub.errors import (
    AlreadyExists,
    CatalogUnavailable,
    DatasetNotFound,
    InvalidInput,
    StaleBase,
    Unauthenticated,
)
from datahub.validation import MAX_JSON_DEPTH, UNREADABLE
from tests.catalog.conftest import rec
from tests.catalog.remote import ServedStore, serve

SECRET = "dh-secret-token-4f1c9a"
FAST = {"attempts": 3, "backoff": 0.01, "budget": 10.0, "timeout": 5.0}


HEADER = json.dumps(RECORDS_HEADER).encode() + b"\n"  # the first line of every record listing


def _line(key: str) -> bytes:
    return b'["%s", "s3://b/%s", "e", 1, "", {}, {}]\n' % (key.encode(), key.encode())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path: Path, shared_api) -> Iterator[ServedStore]:
    """A fresh catalog of the test's own, behind the module's server (tests/catalog/conftest.py)."""
    store = shared_api.store(tmp_path)
    try:
        yield store
    finally:
        store.close()


def test_open_store_picks_the_http_store_and_reads_the_token_from_the_environment(
    served: ServedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATAHUB_API_TOKEN", served.token)
    store = open_store(served.url)
    try:
        assert isinstance(store, HttpCatalogStore)
        cat = Catalog(store)
        cat.create_dataset("ds")
        cat.commit("ds", [Put(rec("a"))])
        assert [r.key for r in cat.list_records("ds")] == ["a"]
    finally:
        store.close()


def test_server_down_is_a_clear_error_naming_the_url_after_bounded_retries() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    store = HttpCatalogStore(url, token=SECRET, **FAST)
    with pytest.raises(CatalogUnavailable) as caught:
        store.head("ds")
    assert url in str(caught.value) and "3 attempt(s)" in str(caught.value)
    assert caught.value.details["attempts"] == 3 and SECRET not in str(caught.value)
    with pytest.raises(CatalogUnavailable):
        list(store.list_records("ds", 1))
    with pytest.raises(CatalogUnavailable):  # a commit too, and nothing is half-written anywhere
        store.commit("ds", 0, [Put(rec("a"))], commit_id="c1")


class _Garbage(BaseHTTPRequestHandler):
    """Answers whatever ``self.server.answer`` says: (status, content type, body)."""

    def do_GET(self) -> None:
        status, ctype, body = self.server.answer  # type: ignore[attr-defined]
        self.server.hits += 1  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def garbage() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    server.hits = 0  # type: ignore[attr-defined]
    # shutdown() waits for the serve loop to look at its flag: every 0.05 s, not every 0.5 s
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ((200, "application/json", b"<html>hello</html>"), "not JSON"),
        ((200, "application/json", b'{"unexpected": true}'), "wrong shape"),
        ((404, "text/html", b"<h1>Not Found</h1>"), "no datahub error"),
        ((502, "text/html", b"bad gateway"), "HTTP 502"),
    ],
)
def test_garbage_answers_are_clear_errors(garbage: ThreadingHTTPServer, answer, why: str) -> None:
    garbage.answer = answer  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{garbage.server_address[1]}"
    store = HttpCatalogStore(url, token=SECRET, **FAST)
    with pytest.raises(CatalogUnavailable, match=why) as caught:
        store.get_version("ds", 1)
    assert url in str(caught.value) and SECRET not in str(caught.value)


@pytest.mark.parametrize(("attempts", "where"), [(2, "toml"), (4, "env")])
def test_the_retry_schedule_is_the_configurations_catalog_section(
    garbage: ThreadingHTTPServer, tmp_path: Path, attempts: int, where: str
) -> None:
    """``[catalog] retry_attempts`` / ``DATAHUB_CATALOG_RETRY_*`` reach the remote store through
    ``open_catalog(url, retry=config.catalog)``: a server that answers 503 to every attempt is
    asked exactly that many times, and the error names the URL."""
    garbage.answer = (503, "text/plain", b"busy")  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{garbage.server_address[1]}"
    toml = tmp_path / "datahub.toml"
    env = {}
    if where == "toml":
        toml.write_text(f"[catalog]\nretry_attempts = {attempts}\nretry_backoff = 0.01\n")
    else:
        toml.write_text("")
        env = {"DATAHUB_CATALOG_RETRY_ATTEMPTS": str(attempts), "DATAHUB_CATALOG_RETRY_BACKOFF": "0"}
    config = load_config(toml, env=env)
    assert (config.catalog.retry_attempts, config.catalog.retry_budget) == (attempts, 60.0)
    catalog = open_catalog(url, retry=config.catalog)
    try:
        with pytest.raises(CatalogUnavailable) as caught:
            catalog.get_dataset("ds")
    finally:
        catalog.close()
    assert garbage.hits == attempts  # type: ignore[attr-defined]
    assert url in str(caught.value)


def test_a_retry_schedule_that_cannot_work_is_a_configuration_error(tmp_path: Path) -> None:
    toml = tmp_path / "datahub.toml"
    toml.write_text("[catalog]\nretry_attempts = 0\n")
    with pytest.raises(InvalidInput, match=r"catalog\.retry_attempts"):
        load_config(toml, env={})


@pytest.mark.parametrize(
    ("body", "why"),
    [
        # cut without its end line: the resumed request (start_after=a) gets "a" again here
        (HEADER + _line("a"), "out of order"),
        (b"", "after 0 item"),  # nothing at all, not even the header
        (HEADER, "after 0 item"),  # the header, then nothing
        (b"not json at all\n", "not JSON"),
        (HEADER + b"not json at all\n", "not JSON"),
        (HEADER + b'{"end": 5}\n', "end line saying 5"),
        (HEADER + b'["a"]\n{"end": 1}\n', "wrong shape"),
        (HEADER + b'{"key": "a"}\n{"end": 1}\n', "wrong shape"),
        (HEADER + _line("b") + _line("a") + b'{"end": 2}\n', "out of order"),
        (HEADER + _line("a") + _line("a") + b'{"end": 2}\n', "out of order"),  # a duplicate
        (HEADER + b'[1, "u", "e", 1, "", {}, {}]\n{"end": 1}\n', "wrong shape"),  # a key that is no string
        # lines are parsed a chunk at a time: one bad line among good ones still fails
        (HEADER + _line("a") + b"not json\n" + _line("b") + b'{"end": 3}\n', "not JSON"),
        (HEADER + _line("a") + b"\n" + _line("b") + b'{"end": 1}\n', "end line saying 1"),  # blank: no item
        (HEADER + _line("a") + b'{"end": 2}\n' + _line("b"), "end line saying 2"),
        (HEADER + b'["a", "s3://b/a", "e', "after 0 item"),  # cut inside the first record
        (b'["a", "s3', "after 0 item"),  # cut inside the header
        # the old format (objects with key names), or a header naming other columns
        (_line("a") + b'{"end": 1}\n', "another format"),
        (b'{"key": "a", "url": "s3://b/a", "etag": "e", "size": 1}\n{"end": 1}\n', "another format"),
        (HEADER.replace(b"/2", b"/3") + _line("a") + b'{"end": 1}\n', "another format"),
    ],
)
def test_a_cut_or_garbled_listing_is_an_error_never_a_shorter_listing(
    garbage: ThreadingHTTPServer, body: bytes, why: str
) -> None:
    garbage.answer = (200, "application/x-ndjson", body)  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{garbage.server_address[1]}"
    store = HttpCatalogStore(url, **FAST)
    with pytest.raises(CatalogUnavailable, match=why) as caught:
        list(store.list_records("ds", 1))
    assert url in str(caught.value)


DIR_HEADER = json.dumps(DIRECTORY_HEADER).encode() + b"\n"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (DIR_HEADER + b'["d/a", "s3://b/a", "e", 1, null]\n"d/s/"\n{"end": 2}\n', None),  # good
        # a whole record row (the format before DirFile rows), under either header
        (DIR_HEADER + b'["d/a", "s3://b/a", "e", 1, "", {}, {}]\n{"end": 1}\n', "wrong shape"),
        (
            DIR_HEADER.replace(b"/2", b"/1") + b'["d/a", "s3://b/a", "e", 1, null]\n{"end": 1}\n',
            "another format",
        ),
        (
            DIR_HEADER + b'[1, "s3://b/a", "e", 1, null]\n{"end": 1}\n',
            "wrong shape",
        ),  # a key that is no string
        (DIR_HEADER + b'["d/x/a", "s3://b/a", "e", 1, null]\n{"end": 1}\n', "outside the directory"),
        (DIR_HEADER + b'["e/a", "s3://b/a", "e", 1, null]\n{"end": 1}\n', "outside the directory"),
        (DIR_HEADER + b'"d/s/t/"\n{"end": 1}\n', "outside the directory"),
        (DIR_HEADER + b'"d/s/"\n["d/a", "s3://b/a", "e", 1, null]\n{"end": 2}\n', "out of order"),
        (  # files alone, checked a chunk at a time: falling or repeated keys are refused too
            DIR_HEADER
            + b'["d/b", "s3://b/b", "e", 1, null]\n["d/a", "s3://b/a", "e", 1, null]\n{"end": 2}\n',
            "out of order",
        ),
        (
            DIR_HEADER
            + b'["d/a", "s3://b/a", "e", 1, null]\n["d/a", "s3://b/a", "e", 1, null]\n{"end": 2}\n',
            "out of order",
        ),
        (
            DIR_HEADER
            + b'["d/a", "s3://b/a", "e", 1, null]\n["d/b/c", "s3://b/c", "e", 1, null]\n{"end": 2}\n',
            "outside the directory",
        ),
        (
            DIR_HEADER + b'["d/a", "s3://b/a", "e", 1, null]\n',
            "after 1 item",
        ),  # cut: never a shorter directory
    ],
)
def test_a_garbled_directory_listing_is_an_error(
    garbage: ThreadingHTTPServer, body: bytes, why: str | None
) -> None:
    garbage.answer = (200, "application/x-ndjson", body)  # type: ignore[attr-defined]
    store = HttpCatalogStore(f"http://127.0.0.1:{garbage.server_address[1]}", **FAST)
    if why is None:
        assert list(store.list_directory("ds", 1, prefix="d/")) == [("d/a", "s3://b/a", "e", 1, None), "d/s/"]
        return
    with pytest.raises(CatalogUnavailable, match=why):
        list(store.list_directory("ds", 1, prefix="d/"))


def test_a_record_whose_meta_holds_an_end_key_is_a_record_not_the_end(garbage: ThreadingHTTPServer) -> None:
    line = _line("a").replace(b", {}, {}]", b', {"end": 1}, {}]')
    garbage.answer = (200, "application/x-ndjson", HEADER + line + _line("b") + b'{"end": 2}\n')  # type: ignore[attr-defined]
    store = HttpCatalogStore(f"http://127.0.0.1:{garbage.server_address[1]}", **FAST)
    records = list(store.list_records("ds", 1))
    assert [r.key for r in records] == ["a", "b"] and records[0].meta == {"end": 1}


def test_api_errors_come_back_as_the_local_stores_classes(served: ServedStore) -> None:
    cat = Catalog(served)
    with pytest.raises(DatasetNotFound, match="'nope'"):
        cat.get_dataset("nope")
    cat.create_dataset("ds")
    cat.commit("ds", [Put(rec("a"))])
    with pytest.raises(StaleBase) as caught:
        cat.commit("ds", [Put(rec("b"))], base=0, commit_id="explicit")
    assert caught.value.details["dataset"] == "ds"
    with pytest.raises(InvalidInput, match="run 'datahub token create"):
        served.get_token("h")
    with pytest.raises(InvalidInput, match="run 'datahub token create/list/revoke' on the API server"):
        served.list_tokens()


def test_tokens_never_appear_in_reprs_errors_or_logs(
    served: ServedStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store = HttpCatalogStore(served.url, token=SECRET, **FAST)  # not a token the server knows
    try:
        with pytest.raises(Unauthenticated, match=r"\$DATAHUB_API_TOKEN") as caught:
            store.head("ds")
        texts = [repr(store), str(store), str(caught.value), repr(caught.value), str(caught.value.details)]
        texts += [r.getMessage() for r in caplog.records]
        assert all(SECRET not in t for t in texts)
    finally:
        store.close()


class _DropFirstCommitAnswer(socketserver.ThreadingTCPServer):
    """A loopback proxy: forwards every request to ``upstream`` (one connection each), but
    for the first commit drops the server's answer after the server has applied it."""

    daemon_threads = allow_reuse_address = True

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream, self.commits_seen, self.dropped = upstream, 0, 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    def deliver(self, request_line: bytes, answer: bytes) -> bytes:
        """What of ``answer`` reaches the client (all of it, or a prefix and then a close)."""
        is_commit = b"/commits " in request_line
        self.commits_seen += is_commit
        drop = is_commit and self.dropped == 0
        self.dropped += drop
        return b"" if drop else answer  # a dropped commit is applied upstream; its answer never arrives


class _CutFirstListing(_DropFirstCommitAnswer):
    """A loopback proxy that sends only the first ``fraction`` of the first record listing's
    answer, then closes the connection (a connection cut mid-stream)."""

    def __init__(self, upstream: tuple[str, int], fraction: float) -> None:
        super().__init__(upstream)
        self.fraction, self.listings = fraction, []

    def deliver(self, request_line: bytes, answer: bytes) -> bytes:
        if b"/records?" not in request_line:
            return answer
        self.listings.append(request_line.decode())
        return answer[: int(len(answer) * self.fraction)] if len(self.listings) == 1 else answer


class _ProxyHandler(socketserver.StreamRequestHandler):
    server: _DropFirstCommitAnswer

    def handle(self) -> None:
        while True:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                byte = self.rfile.read(1)
                if not byte:
                    return
                head += byte
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            body = self.rfile.read(length)
            answer = self._forward(head, body)
            with self.server.lock:
                sent = self.server.deliver(head.split(b"\r\n")[0], answer)
            self.wfile.write(sent)
            if len(sent) < len(answer):
                return  # the rest of the answer never arrives: the connection is closed

    def _forward(self, head: bytes, body: bytes) -> bytes:
        # one upstream connection per request, asked to close, so its answer ends at EOF
        lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith(b"connection:")]
        request = b"\r\n".join(lines[:1] + [b"Connection: close"] + lines[1:])
        with socket.create_connection(self.server.upstream) as up:
            up.sendall(request + body)
            chunks = []
            while chunk := up.recv(65536):
                chunks.append(chunk)
        answer = b"".join(chunks)
        status_and_headers, _, rest = answer.partition(b"\r\n\r\n")
        kept = [ln for ln in status_and_headers.split(b"\r\n") if not ln.lower().startswith(b"connection:")]
        return b"\r\n".join(kept + [b"Connection: keep-alive"]) + b"\r\n\r\n" + rest


@pytest.mark.parametrize("commit_id", [None, "caller-made-id"])
def test_a_commit_whose_answer_is_lost_is_retried_with_the_same_id_and_applied_once(
    tmp_path: Path, commit_id: str | None
) -> None:
    server, backing, token = serve(tmp_path)
    proxy = _DropFirstCommitAnswer(("127.0.0.1", server.port))
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    store = HttpCatalogStore(f"http://127.0.0.1:{proxy.server_address[1]}", token=token, **FAST)
    try:
        cat = Catalog(store)
        cat.create_dataset("ds")
        v1 = cat.commit("ds", (Put(rec(k)) for k in ["a", "b"]), commit_id=commit_id)
        assert proxy.dropped == 1 and proxy.commits_seen == 2  # the answer was lost, the retry answered
        assert v1.seq == 1 and [v.seq for v in backing.log("ds")] == [1]  # exactly one version
        assert [r.key for r in backing.list_records("ds", 1)] == ["a", "b"]
    finally:
        store.close()
        proxy.shutdown()
        proxy.server_close()
        server.stop()
        backing.close()


class _DropFirstCreateAnswer(_DropFirstCommitAnswer):
    """A loopback proxy that drops the answer to the first dataset creation (applied upstream)."""

    def deliver(self, request_line: bytes, answer: bytes) -> bytes:
        drop = request_line.startswith(b"POST /v1/remote/datasets ") and self.dropped == 0
        self.dropped += drop
        return b"" if drop else answer


def _behind_create_dropper(tmp_path: Path) -> tuple[HttpCatalogStore, Any, _DropFirstCreateAnswer, Any]:
    server, backing, token = serve(tmp_path)
    proxy = _DropFirstCreateAnswer(("127.0.0.1", server.port))
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    store = HttpCatalogStore(f"http://127.0.0.1:{proxy.server_address[1]}", token=token, **FAST)
    return store, backing, proxy, server


def test_a_create_whose_answer_is_lost_is_the_callers_dataset_not_an_already_exists(tmp_path: Path) -> None:
    """The retry of a create that was applied but whose answer never came finds the name taken:
    the dataset is there as asked, so the caller gets it, not AlreadyExists for its own work."""
    store, backing, proxy, server = _behind_create_dropper(tmp_path)
    try:
        made = Catalog(store).create_dataset("ds", description="mine", source="s3://b/p")
        assert proxy.dropped == 1
        assert (made.name, made.description, made.source) == ("ds", "mine", "s3://b/p")
        assert [d.name for d in backing.list_datasets()] == ["ds"]
    finally:
        store.close(), proxy.shutdown(), proxy.server_close(), server.stop(), backing.close()


def test_a_lost_create_answer_over_someone_elses_dataset_is_still_already_exists(tmp_path: Path) -> None:
    store, backing, proxy, server = _behind_create_dropper(tmp_path)
    try:
        backing.create_dataset("ds", description="theirs")
        with pytest.raises(AlreadyExists, match="'ds' already exists") as caught:
            Catalog(store).create_dataset("ds", description="mine")
        assert proxy.dropped == 1 and caught.value.details["dataset"] == "ds"
        assert backing.get_dataset("ds").description == "theirs"
    finally:
        store.close(), proxy.shutdown(), proxy.server_close(), server.stop(), backing.close()


def test_listings_stream_in_key_order_across_many_records(served: ServedStore) -> None:
    cat = Catalog(served)
    cat.create_dataset("big")
    keys = [f"k/{i:05d}" for i in range(3000)]
    cat.commit("big", (Put(rec(k)) for k in keys))
    listing = cat.list_records("big")
    first = next(listing)  # parsed as it arrives: the first record before the rest
    assert first.key == keys[0]
    assert [first.key] + [r.key for r in listing] == keys
    assert len(cat.lookup_records("big", 1, keys[::7] + ["absent"])) == len(keys[::7])


def test_record_lines_carry_every_field_exactly_as_the_backing_store_holds_it(served: ServedStore) -> None:
    """Record lines are written without a pydantic model: non-ASCII text, quotes, nested
    meta and labels, and empty ones must come back equal, in listings and in diffs."""
    cat = Catalog(served)
    cat.create_dataset("exact")
    records = [
        Record('a/\u00e9t\u00e9 "q".jpg', "s3://b/\u00fc", "e1", 0, "sha256:" + "0" * 64),
        Record(
            "b/x",
            "s3://b/x",
            "e2",
            2**40,
            "",
            {"split": "train", "n": [1, 2.5, None, True]},
            {"c": {"d": "\u00df"}},
        ),
    ]
    cat.commit("exact", (Put(r) for r in records))
    cat.commit("exact", [Put(Record("b/x", "s3://b/x", "e3", 1, "", {}, {"c": 1}))])
    backing = served.backing
    assert list(cat.list_records("exact", 1)) == list(backing.list_records("exact", 1)) == records
    assert list(cat.diff("exact", 1, 2)) == list(backing.diff("exact", 1, 2))


class _Scripted(_Garbage):
    """Answers ``self.server.script[i]`` to the i-th request and records the request paths."""

    def do_GET(self) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        script = self.server.script  # type: ignore[attr-defined]
        self.server.answer = (
            200,
            "application/x-ndjson",
            script[min(len(self.server.paths), len(script)) - 1],
        )  # type: ignore[attr-defined]
        super().do_GET()


@pytest.mark.parametrize("always_cut", [False, True])
def test_a_cut_record_listing_resumes_after_the_last_key_or_fails_never_short(always_cut: bool) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    server.hits, server.paths = 0, []  # type: ignore[attr-defined]
    cut = HEADER + _line("a") + _line("b")  # no end line: the stream was cut
    rest = (
        [HEADER + _line("c"), HEADER + _line("d")] if always_cut else [HEADER + _line("c") + b'{"end": 1}\n']
    )
    server.script = [cut, *rest]  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    store = HttpCatalogStore(f"http://127.0.0.1:{server.server_address[1]}", **FAST)
    try:
        if always_cut:
            with pytest.raises(CatalogUnavailable, match="without its end line"):
                list(store.list_records("ds", 1))
        else:
            assert [r.key for r in store.list_records("ds", 1)] == ["a", "b", "c"]
            assert "start_after=b" in server.paths[1]  # type: ignore[attr-defined]
    finally:
        store.close()
        server.shutdown()
        server.server_close()


# Keys that need escaping in JSON and in a query string (the resumed request's start_after).
ODD = [
    'q"uote',
    "back\\slash",
    "sp ace",
    "pl+us",
    "amp&er=sand",
    "h#sh?",
    "\u00e9t\u00e9",
    "\U0001f600",
    "col:on;semi",
]


def test_a_listing_cut_mid_stream_by_the_network_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    """A real server behind a proxy that closes the first listing's connection part-way
    through (inside a line): the client resumes after the last complete record it got, and
    the listing equals the backing store's, record for record."""
    server, backing, token = serve(tmp_path)
    proxy = _CutFirstListing(("127.0.0.1", server.port), fraction=0.6)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    store = HttpCatalogStore(f"http://127.0.0.1:{proxy.server_address[1]}", token=token, **FAST)
    try:
        backing.create_dataset("ds")
        meta = {"caption": "x" * 300, "end": 1}  # ~0.4 KB a line: the 60 % cut is beyond the 1 MiB first read
        keys = sorted(f"{ODD[i % len(ODD)]}/{i:05d}" for i in range(8000))
        backing.commit("ds", (Put(Record(k, f"s3://b/{k}", "e", i, "", meta)) for i, k in enumerate(keys)))
        got = list(store.list_records("ds", 1))
        assert len(proxy.listings) == 2 and "start_after=" in proxy.listings[1]  # cut once, resumed once
        assert got == list(backing.list_records("ds", 1))  # nothing lost, nothing twice
    finally:
        store.close()
        proxy.shutdown()
        proxy.server_close()
        server.stop()
        backing.close()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_MAPS = st.dictionaries(
    st.sampled_from(["end", "key", "", "\u00df", '"', "\n"]) | st.text(max_size=6), _JSON, max_size=4
)
_RECORDS = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=12),
        st.text(max_size=12),
        st.text(max_size=8),
        st.integers(0, 2**63 - 1),
        st.text(max_size=8),
        _MAPS,
        _MAPS,
    ),
    max_size=6,
    unique_by=lambda r: r[0],
).map(lambda rows: [Record(*r) for r in sorted(rows)])


@pytest.fixture
def garbage_store(garbage: ThreadingHTTPServer) -> Iterator[HttpCatalogStore]:
    """One client of ``garbage`` for all of a property test's examples: a new httpx client
    costs ~25 ms of CPU (its TLS context) and 0.1–0.4 s at load 13, the examples' whole time
    when each made its own. Each example's listing is still its own request and connection
    (``_Garbage`` answers HTTP/1.0: the connection closes after the answer)."""
    store = HttpCatalogStore(f"http://127.0.0.1:{garbage.server_address[1]}", **FAST)
    try:
        yield store
    finally:
        store.close()


def _serve(garbage: ThreadingHTTPServer, body: bytes) -> None:
    garbage.answer = (200, "application/x-ndjson", body)  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=_RECORDS)
def test_record_rows_round_trip_any_text_and_metadata(
    garbage: ThreadingHTTPServer, garbage_store: HttpCatalogStore, records: list[Record]
) -> None:
    """What the server writes from Records (record_json: MongoDB, filtered listings, diffs)
    the client reads back equal: any text, quotes, escapes, non-ASCII, odd meta keys
    (``end`` too), nested values, 64-bit sizes."""
    _serve(garbage, b"".join(_ndjson(iter(records), record_json, RECORDS_LINE, chunk_bytes=64)))
    assert list(garbage_store.list_records("ds", 1)) == records


_KEY_PART = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Cf", "Zl", "Zp")), min_size=1, max_size=6
)
_KEYS = st.lists(_KEY_PART, min_size=1, max_size=3).map("/".join)
_DATASETS = itertools.count()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_rows_sqlite_writes_round_trip_odd_keys_and_metadata(
    garbage: ThreadingHTTPServer, garbage_store: HttpCatalogStore, tmp_path: Path, data: st.DataObject
) -> None:
    """The rows SQLite itself writes (``list_record_json``: stored meta/labels text as it
    is) read back equal to the store's own records: odd keys, etags and metadata."""
    catalog = Catalog(SQLiteCatalogStore(tmp_path / "catalog.db"))
    try:
        name = f"d{next(_DATASETS)}"
        catalog.create_dataset(name)
        keys = data.draw(st.lists(_KEYS, min_size=1, max_size=5, unique=True))
        records = [
            Record(
                k,
                f"s3://b/{i}",
                data.draw(st.text(min_size=1, max_size=6)),
                data.draw(st.integers(0, 2**63 - 1)),
                "",
                data.draw(_MAPS),
                data.draw(_MAPS),
            )
            for i, k in enumerate(keys)
        ]
        try:
            catalog.commit(name, (Put(r) for r in records))
        except InvalidInput:
            assume(False)  # a key or value the catalog refuses
        lines = catalog.store.list_record_json(name, 1)
        _serve(garbage, b"".join(_ndjson(lines, None, RECORDS_LINE, chunk_bytes=64)))
        assert (
            list(garbage_store.list_records("ds", 1))
            == list(catalog.list_records(name, 1))
            == sorted(records, key=lambda r: r.key)
        )
    finally:
        catalog.close()


def test_stored_metadata_that_might_nest_too_deep_is_listed_as_a_direct_read_shows_it(
    served: ServedStore,
) -> None:
    """Rows whose stored meta has more brackets than the depth limit are not written by
    SQLite as they are: one too deep (written before the limit existed) comes out as the
    direct read's marker, one with many brackets but shallow comes out whole."""
    cat = Catalog(served)
    cat.create_dataset("deep")
    shallow = {"boxes": [[i, i + 1] for i in range(40)]}
    cat.commit("deep", [Put(rec("a")), Put(rec("b", labels=shallow)), Put(rec("c"))])
    deep: dict = {}
    for _ in range(MAX_JSON_DEPTH + 5):
        deep = {"x": deep}
    with sqlite3.connect(served.backing.store.path) as con:  # as an old release could have stored it
        con.execute("UPDATE records SET meta = ? WHERE key = 'a'", (json.dumps(deep),))
    listed = list(cat.list_records("deep", 1))
    assert listed == list(served.backing.list_records("deep", 1))
    assert list(listed[0].meta) == [UNREADABLE] and listed[1].labels == shallow


def test_a_garbage_line_in_a_real_sized_listing_names_the_url(garbage: ThreadingHTTPServer) -> None:
    """One bad line among thousands (several chunks): an error naming the server's URL, and
    the records before it were all that was returned."""
    good = [_line(f"k{i:05d}") for i in range(20000)]
    body = (
        HEADER
        + b"".join(good[:15000])
        + b"<html>oops</html>\n"
        + b"".join(good[15000:])
        + b'{"end": 20001}\n'
    )
    garbage.answer = (200, "application/x-ndjson", body)  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{garbage.server_address[1]}"
    store = HttpCatalogStore(url, token=SECRET, **FAST)
    seen = []
    with pytest.raises(CatalogUnavailable, match="not JSON") as caught:
        seen.extend(r.key for r in store.list_records("ds", 1))
    assert url in str(caught.value) and SECRET not in str(caught.value)
    assert seen == [f"k{i:05d}" for i in range(len(seen))] and len(seen) < 15000


def test_sqlite_rows_are_the_records_of_list_records_for_every_window(tmp_path: Path) -> None:
    """``list_record_json`` (the rows SQLite writes) and ``list_records`` agree for every
    prefix / start_after / limit the route passes (a resumed listing uses start_after),
    across page borders; the base class's default (other stores) agrees too."""
    store = SQLiteCatalogStore(tmp_path / "catalog.db", page_size=3)
    catalog = Catalog(store)
    try:
        catalog.create_dataset("ds")
        keys = [f"{d}/{i}" for d in ("a", "ab", "b") for i in range(5)]
        meta = {"n": [1, {"x": None}], "s": '\u00e9\\"'}
        catalog.commit(
            "ds", (Put(rec(k, meta=meta if i % 2 else {}, checksum="")) for i, k in enumerate(keys))
        )
        for window in [
            {},
            {"prefix": "a/"},
            {"start_after": "a/4"},
            {"limit": 4},
            {"prefix": "ab/", "start_after": "ab/1", "limit": 2},
            {"limit": 0},
        ]:
            expected = [json.loads(record_json(r)) for r in store.list_records("ds", 1, **window)]
            assert [json.loads(line) for line in store.list_record_json("ds", 1, **window)] == expected, (
                window
            )
            default = CatalogStore.list_record_json(store, "ds", 1, **window)
            assert [json.loads(line) for line in default] == expected, window
    finally:
        catalog.close()
