"""A stop signal at a bad moment in a local pack worker (review13).

``datahub.pack.worker_process`` turns SIGTERM/SIGINT into an exception raised wherever the main
thread is, so that ``work`` unwinds through its hand-back and releases its task by its lease
(only the worker knows the lease id: over an API server the executor cannot release it). But
the hand-back covers only the packing: a signal that lands while the queue call that claimed
the task is returning, or between the packing and the completion, left the task DOING under a
lease nobody releases, so it waited for the lease to expire (60 s by default, the very wait the
hand-back exists to remove). The signal here is a real SIGTERM the process sends itself from
inside the real queue call, the one moment a test can choose deterministically.
"""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from datahub.catalog import Catalog
from datahub.config import Config
from datahub.pack import PackSpec, start_job, worker_process
from datahub.tasks import DOING, DONE, TODO, open_task_queue
from datahub.tasks.sqlite import SqliteTaskQueue
from tests.pack.conftest import import_manifest, write_source


@pytest.fixture
def handlers() -> Iterator[None]:
    """``worker_process.main`` installs its own SIGTERM/SIGINT handlers: put pytest's back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _job(config: Config, catalog: Catalog, tmp_path: Path) -> str:
    import_manifest(catalog, config, write_source(tmp_path / "src", 2), "photos")
    spec = PackSpec.parse(resize="shorter=40", shard_size="1B")  # two tasks, one photo each
    queue = open_task_queue(config.resolved_catalog_url)
    try:
        return start_job(catalog, queue, "photos", "out", spec).job
    finally:
        queue.close()


def _run_worker(config: Config, job: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """``python -m datahub.pack.worker_process`` in this process, its config on stdin."""
    monkeypatch.setattr("sys.stdin", io.StringIO(config.model_dump_json()))
    return worker_process.main(["--job", job, "--name", "w1", "--lease", "600"])


def _signalled(method: Callable, *, before: bool) -> Callable:
    """``method`` of the real queue, with a SIGTERM this process sends itself inside it:
    before the queue does anything (``before``) or once its answer is in hand."""

    def call(self, *args, **kwargs):
        if before:
            os.kill(os.getpid(), signal.SIGTERM)
            return method(self, *args, **kwargs)
        answer = method(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        return answer

    return call


def _states(config: Config, job: str) -> list[tuple[str, int]]:
    queue = open_task_queue(config.resolved_catalog_url)
    try:
        return [(t.state, t.attempts) for t in queue.tasks(job)]
    finally:
        queue.close()


def test_a_signal_as_the_claim_returns_hands_the_claimed_task_back(
    config: Config, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handlers: None
) -> None:
    """The claim committed (the task is DOING with a new lease) and SIGTERM lands before ``work``
    holds the task: before, nothing released it and it waited 600 s here for its lease."""
    job = _job(config, catalog, tmp_path)
    monkeypatch.setattr(SqliteTaskQueue, "claim", _signalled(SqliteTaskQueue.claim, before=False))
    assert _run_worker(config, job, monkeypatch) == 128 + signal.SIGTERM
    states = _states(config, job)
    assert not [s for s in states if s[0] == DOING], f"a task waits for its lease to expire: {states}"
    assert (TODO, 1) in states  # claimed once, handed back


def test_a_signal_between_packing_and_completion_leaves_no_task_leased(
    config: Config, catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handlers: None
) -> None:
    """The shard is packed and SIGTERM lands as the completion starts: the task is either
    completed or handed back, never left DOING under a lease only the stopped worker knew."""
    job = _job(config, catalog, tmp_path)
    monkeypatch.setattr(SqliteTaskQueue, "complete", _signalled(SqliteTaskQueue.complete, before=True))
    assert _run_worker(config, job, monkeypatch) == 128 + signal.SIGTERM
    states = _states(config, job)
    assert not [s for s in states if s[0] == DOING], f"a task waits for its lease to expire: {states}"
    assert states[0] in ((DONE, 1), (TODO, 1)) and states[1] == (TODO, 0)
