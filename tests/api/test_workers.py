"""``datahub serve --workers N``: several processes on one socket, supervised, no orphans.

Real ``datahub serve`` processes over a SQLite catalog; which worker answered is read from
``/metrics`` (``datahub_api_worker_info{pid=...}``), on a fresh connection each time.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.servers import free_port

GUARD = 60.0  # a hang guard, never a timing goal
WORKER = re.compile(r'datahub_api_worker_info\{pid="(\d+)"\}')


class Served:
    def __init__(self, proc: subprocess.Popen, url: str) -> None:
        self.proc, self.url = proc, url

    def worker(self) -> int:
        r = httpx.get(f"{self.url}/metrics", headers={"Connection": "close"}, timeout=GUARD)
        return int(WORKER.search(r.text).group(1))

    def workers_seen(self, want: int, attempts: int = 400) -> set[int]:
        seen: set[int] = set()
        with ThreadPoolExecutor(8) as pool:
            for _ in range(attempts // 8):
                seen.update(pool.map(lambda _: self.worker(), range(8)))
                if len(seen) >= want:
                    break
        return seen


def children(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return {int(x) for x in out.split()}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split(") ")[1][0] != "Z"


def wait_for(predicate, timeout: float = GUARD) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def serve(home: Path, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "datahub.cli.main", "--home", str(home), "serve", "--no-labelx", *args]
    # its own process group, so a group signal reaches the server and its workers, not pytest
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    port = free_port()
    proc = serve(tmp_path / "var", "--port", str(port), "--workers", "2")
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: _healthy(url) or proc.poll() is not None), "server did not start"
        assert proc.poll() is None, proc.stderr.read()
        yield Served(proc, url)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(GUARD)
        for child in children(proc.pid):
            os.kill(child, signal.SIGKILL)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_two_workers_answer_and_see_each_others_commits(served: Served):
    workers = served.workers_seen(2)
    assert len(workers) == 2 and workers == children(served.proc.pid)
    with httpx.Client(base_url=served.url, headers={"Connection": "close"}, timeout=GUARD) as client:
        assert client.post("/v1/datasets", json={"name": "shared"}).status_code == 201
        change = {"op": "put", "record": {"key": "a.jpg", "url": "s3://b/a.jpg", "etag": "e1", "size": 3}}
        assert client.post("/v1/datasets/shared/commits", json={"changes": [change]}).status_code == 201
        # every later request sees the commit, whichever worker takes it
        for _ in range(40):
            assert client.get("/v1/datasets/shared/versions/latest").json()["seq"] == 1


def _worker_of(client: httpx.Client) -> int:
    """The pid of the worker behind this client's (kept-alive) connection."""
    return int(WORKER.search(client.get("/metrics").text).group(1))


def test_a_commit_through_one_worker_is_read_through_the_other(served: Served):
    """One keep-alive connection stays with one worker: commit on one, read on a connection
    that /metrics shows is served by the other worker."""
    with httpx.Client(base_url=served.url, timeout=GUARD) as writer:
        wrote_on = _worker_of(writer)
        assert writer.post("/v1/datasets", json={"name": "across"}).status_code == 201
        change = {"op": "put", "record": {"key": "k.jpg", "url": "s3://b/k.jpg", "etag": "e", "size": 1}}
        assert writer.post("/v1/datasets/across/commits", json={"changes": [change]}).status_code == 201
        assert _worker_of(writer) == wrote_on  # the whole commit went through that one worker
    for _ in range(200):
        with httpx.Client(base_url=served.url, timeout=GUARD) as reader:
            if _worker_of(reader) == wrote_on:
                continue
            page = reader.get("/v1/datasets/across/versions/latest/records").json()
            assert [r["key"] for r in page["items"]] == ["k.jpg"]
            assert _worker_of(reader) != wrote_on
            return
    pytest.fail(f"no connection reached a worker other than {wrote_on} in 200 tries")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "Ctrl-C to the process group"])
def test_a_stop_signal_stops_every_worker_and_the_parent_exits_0(served: Served, how: str):
    workers = children(served.proc.pid)
    assert len(workers) == 2
    if how == "Ctrl-C to the process group":  # what a terminal does: every worker gets SIGINT too
        os.killpg(served.proc.pid, signal.SIGINT)
    else:
        served.proc.send_signal(getattr(signal, how))
    assert served.proc.wait(GUARD) == 0
    assert wait_for(lambda: not any(alive(w) for w in workers))
    assert "stopped" in served.proc.stderr.read()


def test_kill_9_of_the_parent_leaves_no_orphan(served: Served):
    workers = children(served.proc.pid)
    served.proc.send_signal(signal.SIGKILL)
    served.proc.wait(GUARD)
    assert wait_for(lambda: not any(alive(w) for w in workers)), "a worker outlived its parent"
    assert not _healthy(served.url)


def test_a_dead_worker_is_replaced(served: Served):
    first = children(served.proc.pid)
    victim = min(first)
    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: len(children(served.proc.pid) - {victim}) == 2)
    assert victim not in children(served.proc.pid)
    # the server answers again (within GUARD: one 2-s try failed at load 5-18 with a 16-GB commit
    # writing beside it, while the replacement was still starting) and its parent lives on
    assert wait_for(lambda: _healthy(served.url)) and served.proc.poll() is None


@pytest.mark.parametrize("bad", ["0", "-1", "65", "many"])
def test_bad_worker_counts_are_refused_and_nothing_listens(tmp_path: Path, bad: str):
    port = free_port()
    proc = serve(tmp_path / "var", "--port", str(port), "--workers", bad)
    _, err = proc.communicate(timeout=GUARD)
    assert proc.returncode == 2, err
    assert "--workers" in err and "Traceback" not in err
    assert not _healthy(f"http://127.0.0.1:{port}")


def test_a_second_server_on_the_same_port_is_refused_not_joined(served: Served, tmp_path: Path):
    """Workers listen with SO_REUSEPORT; a second server must not silently join their group."""
    port = served.url.rsplit(":", 1)[1]
    other = serve(tmp_path / "other", "--port", port, "--workers", "2")
    _, err = other.communicate(timeout=GUARD)
    assert other.returncode == 4 and "already in use" in err, err
    assert served.workers_seen(2) == children(served.proc.pid)
