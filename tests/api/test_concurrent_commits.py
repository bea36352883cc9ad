"""Concurrent commits through the real API (issue 24 item 3): they succeed in turn, or the
answer is 503 ``busy`` with ``Retry-After`` at once, never a 409 the client did not cause;
the remote-catalog client (what the CLI uses with ``catalog_url = http://…``) honours it.

The server's SQLite busy timeout is set to 50 ms, so a commit of a few thousand changes (its
body is parsed inside the transaction) outlasts it as a 59 MB commit outlasts the default
30 s. ``bench/api/commit_memory.py --mb 59 --concurrent 3`` is the real case (docs/benchmarks.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path

import httpx

from datahub.catalog import Catalog, Put
from datahub.catalog.http_store import HttpCatalogStore
from tests.catalog.conftest import rec
from tests.catalog.remote import serve

GUARD = 120.0  # a hang guard, never a timing goal


def _body(prefix: str, n: int) -> bytes:
    changes = [
        {
            "op": "put",
            "record": {
                "key": f"{prefix}/{i:06d}.jpg",
                "url": f"s3://bucket/{prefix}/{i:06d}.jpg",
                "etag": "0123456789abcdef0123456789abcdef",
                "size": 1234,
                "meta": {"split": "train", "width": 640},
                "labels": {"class": "cat"},
            },
        }
        for i in range(n)
    ]
    return json.dumps({"changes": changes, "message": prefix}).encode()


def test_three_concurrent_commits_all_succeed_in_turn(tmp_path: Path) -> None:
    server, backing, token = serve(tmp_path, {"busy_timeout_ms": 50})
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        with httpx.Client(base_url=server.url, headers=headers, timeout=GUARD) as client:
            assert client.post("/v1/datasets", json={"name": "ds"}).status_code == 201
            bodies = [_body(p, 6000) for p in ("a", "b", "c")]
            answers: list[httpx.Response] = []
            threads = [
                threading.Thread(
                    target=lambda b=b: answers.append(client.post("/v1/datasets/ds/commits", content=b))
                )
                for b in bodies
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(GUARD)
            assert sorted(r.status_code for r in answers) == [201, 201, 201], [r.text[:300] for r in answers]
            assert sorted(r.json()["seq"] for r in answers) == [1, 2, 3]
        assert backing.store.get_version("ds", 3).record_count == 18000
    finally:
        server.stop()
        backing.close()


def test_a_turn_held_elsewhere_is_503_busy_with_retry_after_and_the_remote_client_retries(
    tmp_path: Path,
) -> None:
    server, backing, token = serve(tmp_path)
    gate = backing.store._gate
    gate.max_wait = 0.2
    fd = os.open(
        gate.lock_path, os.O_RDWR | os.O_CREAT
    )  # another process's commit, as far as the server sees
    headers = {"Authorization": f"Bearer {token}"}
    try:
        backing.create_dataset("ds")
        fcntl.flock(fd, fcntl.LOCK_EX)
        with httpx.Client(base_url=server.url, headers=headers, timeout=GUARD) as client:
            r = client.post(
                "/v1/datasets/ds/commits", json={"changes": [{"op": "put", "record": rec_json("x")}]}
            )
        assert r.status_code == 503 and r.json()["error"]["code"] == "busy", r.text
        assert int(r.headers["Retry-After"]) >= 1
        assert "'ds'" in r.json()["error"]["message"] and "retry" in r.json()["error"]["message"]
        assert backing.store.head("ds") == 0  # nothing written
        # The remote catalog (the CLI's, with catalog_url = http://...) waits and sends it again.
        threading.Timer(0.5, fcntl.flock, (fd, fcntl.LOCK_UN)).start()
        remote = Catalog(HttpCatalogStore(server.url, token=token, attempts=3, backoff=0.01))
        assert remote.commit("ds", [Put(rec("y"))]).seq == 1
        remote.close()
        assert [x.key for x in backing.store.list_records("ds", 1)] == ["y"]
    finally:
        os.close(fd)
        server.stop()
        backing.close()


def rec_json(key: str) -> dict:
    return {"key": key, "url": f"s3://bucket/{key}", "etag": "e1", "size": 1}
