"""review35: a tag deletion or a conditional dataset update whose answer is lost (applied by the
server, the connection cut before the client read the answer) is not reported as failed.

Why: ``ApiClient`` retries a call whose connection broke; the retry of an applied DELETE finds
no tag (404) and the retry of an applied ``If-Match`` PATCH finds the next revision (412), so
the caller was told its own completed work had failed and would redo or undo it. Every server
here is real, on 127.0.0.1, behind a loopback proxy that drops the first matching answer."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from datahub.catalog import Catalog, Put
from datahub.catalog.http_store import HttpCatalogStore
from datahub.errors import NotFound, PreconditionFailed
from tests.catalog.conftest import rec
from tests.catalog.remote import serve
from tests.catalog.test_http_store import FAST, _DropFirstCommitAnswer


class _DropFirst(_DropFirstCommitAnswer):
    """Drops the answer to the first request whose request line starts with ``prefix``."""

    def __init__(self, upstream: tuple[str, int], prefix: bytes) -> None:
        super().__init__(upstream)
        self.prefix = prefix

    def deliver(self, request_line: bytes, answer: bytes) -> bytes:
        drop = request_line.startswith(self.prefix) and self.dropped == 0
        self.dropped += drop
        return b"" if drop else answer


@pytest.fixture
def behind(tmp_path: Path) -> Iterator[Any]:
    """(remote Catalog behind a dropper of ``prefix``'s first answer, backing Catalog, proxy)."""
    server, backing, token = serve(tmp_path)
    made: list[Any] = []

    def make(prefix: bytes) -> tuple[Catalog, Catalog, _DropFirst]:
        proxy = _DropFirst(("127.0.0.1", server.port), prefix)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        store = HttpCatalogStore(f"http://127.0.0.1:{proxy.server_address[1]}", token=token, **FAST)
        made.append((store, proxy))
        return Catalog(store), backing, proxy

    try:
        yield make
    finally:
        for store, proxy in made:
            store.close(), proxy.shutdown(), proxy.server_close()
        server.stop(), backing.close()


def test_an_untag_whose_answer_is_lost_is_done_not_not_found(behind) -> None:
    cat, backing, proxy = behind(b"DELETE /v1/datasets/ds/tags/")
    backing.create_dataset("ds")
    backing.commit("ds", [Put(rec("a"))])
    backing.tag("ds", "gold", 1)
    cat.untag("ds", "gold")
    assert proxy.dropped == 1
    assert backing.store.list_versions("ds").__next__().tags == ()


def test_an_untag_of_a_tag_that_never_was_is_still_not_found(behind) -> None:
    cat, backing, proxy = behind(b"NOTHING")
    backing.create_dataset("ds")
    backing.commit("ds", [Put(rec("a"))])
    with pytest.raises(NotFound, match="no tag 'gold'"):
        cat.untag("ds", "gold")


def test_a_conditional_update_whose_answer_is_lost_is_the_update_not_precondition_failed(behind) -> None:
    cat, backing, proxy = behind(b"PATCH /v1/datasets/ds ")
    backing.create_dataset("ds", description="old")
    made = cat.store.update_dataset("ds", {"description": "new"}, expected_revision=0)
    assert proxy.dropped == 1
    assert (made.description, made.revision) == ("new", 1)
    assert backing.store.get_dataset("ds").revision == 1


def test_a_conditional_update_after_someone_elses_is_still_precondition_failed(behind) -> None:
    cat, backing, proxy = behind(b"NOTHING")
    backing.create_dataset("ds", description="old")
    backing.store.update_dataset("ds", {"description": "theirs"}, expected_revision=0)
    with pytest.raises(PreconditionFailed):
        cat.store.update_dataset("ds", {"description": "new"}, expected_revision=0)
    assert backing.store.get_dataset("ds").description == "theirs"


class _CutFirstCommitUpload(_DropFirstCommitAnswer):
    """Forwards only the first half of the first commit's body upstream (with its whole
    ``Content-Length``), then closes both sides: an upload that died mid-way."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(upstream)
        self.cut = 0

    def forward(self, head: bytes, body: bytes) -> bytes | None:
        if b"/commits " not in head.split(b"\r\n")[0] or self.cut:
            return None
        self.cut += 1
        with socket.create_connection(self.upstream) as up:
            up.sendall(head + body[: len(body) // 2])
        return b"cut"  # an "answer" that ``deliver`` drops (the first commit's): the proxy closes


def test_a_commit_whose_upload_dies_mid_way_leaves_nothing_and_the_retry_makes_one_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guard (passes on the base): the server's body spool sees the client go away and never
    runs the commit; the client's retry sends the whole body and makes exactly one version."""
    from tests.catalog import test_http_store

    server, backing, token = serve(tmp_path)
    proxy = _CutFirstCommitUpload(("127.0.0.1", server.port))
    original = test_http_store._ProxyHandler._forward

    def forward(handler: Any, head: bytes, body: bytes) -> bytes:
        cut = (
            handler.server.forward(head, body) if isinstance(handler.server, _CutFirstCommitUpload) else None
        )
        return original(handler, head, body) if cut is None else cut

    monkeypatch.setattr(test_http_store._ProxyHandler, "_forward", forward)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    store = HttpCatalogStore(f"http://127.0.0.1:{proxy.server_address[1]}", token=token, **FAST)
    try:
        cat = Catalog(store)
        cat.create_dataset("ds")
        keys = [f"k{i:05d}" for i in range(3000)]
        v1 = cat.commit("ds", (Put(rec(k)) for k in keys))
        assert proxy.cut == 1 and v1.seq == 1
        assert [v.seq for v in backing.log("ds")] == [1]
        assert [r.key for r in backing.list_records("ds", 1)] == keys
    finally:
        store.close(), proxy.shutdown(), proxy.server_close(), server.stop(), backing.close()


class _GatewayTimeoutFirst(_DropFirst):
    """Answers the first matching request 504 (a load balancer that gave up on the server),
    after the server applied it."""

    def deliver(self, request_line: bytes, answer: bytes) -> bytes:
        if super().deliver(request_line, answer):
            return answer
        return b"HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def test_an_untag_answered_by_a_gateway_timeout_after_the_server_applied_it_is_done(tmp_path: Path) -> None:
    """A 5xx that is not the server's own (a gateway's) says nothing of whether the request was
    applied: the retry that finds no tag is the first attempt's work, as after a cut connection."""
    server, backing, token = serve(tmp_path)
    proxy = _GatewayTimeoutFirst(("127.0.0.1", server.port), b"DELETE /v1/datasets/ds/tags/")
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    store = HttpCatalogStore(f"http://127.0.0.1:{proxy.server_address[1]}", token=token, **FAST)
    try:
        backing.create_dataset("ds")
        backing.commit("ds", [Put(rec("a"))])
        backing.tag("ds", "gold", 1)
        Catalog(store).untag("ds", "gold")
        assert proxy.dropped == 1
        assert next(backing.store.list_versions("ds")).tags == ()
    finally:
        store.close(), proxy.shutdown(), proxy.server_close(), server.stop(), backing.close()
