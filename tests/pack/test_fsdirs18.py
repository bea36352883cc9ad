"""A pack worker's stderr lines quote other people's strings (its ``--name``, a job name, a
path) escaped (``datahub.console.context.shown``): an escape sequence in them must not reach
the terminal of whoever runs ``datahub pack``, nor a newline forge a line of its own."""

from __future__ import annotations

import io
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.config import Config
from datahub.pack import worker_process
from datahub.tasks.sqlite import SqliteTaskQueue

EVIL = "\x1b[2J\x1b]0;owned\x07\nerror: forged"


@pytest.fixture
def handlers() -> Iterator[None]:
    """``worker_process.main`` installs its own SIGTERM/SIGINT handlers: put pytest's back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _safe(text: str) -> bool:
    return "\x1b" not in text and "\x07" not in text and "\nerror: forged" not in text


def test_the_workers_error_line_is_escaped(config: Config, handlers, monkeypatch, capsys) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(config.model_dump_json()))
    code = worker_process.main(["--job", f"job{EVIL}", "--name", f"w{EVIL}"])
    err = capsys.readouterr().err
    assert code == 3 and _safe(err), err
    assert err.startswith("pack worker w\\x1b[2J\\x1b]0;owned\\x07\\x0aerror: forged: task job ")
    assert len(err.splitlines()) == 1, err


def test_a_failed_hand_back_is_reported_escaped(tmp_path: Path, capsys) -> None:
    """The queue's own error names its database, whose path holds control characters here;
    the queue is locked by another writer, so the release fails (once its busy wait is over)."""
    directory = tmp_path / f"q{EVIL}"
    directory.mkdir()
    queue = SqliteTaskQueue(directory / "tasks.db", busy_timeout=0.01)
    try:
        queue.create_job("j", [{"n": 0}], {})
        hand_back = worker_process._HandBack(queue)
        assert hand_back.claim("j", "w1", 600) is not None
        blocker = sqlite3.connect(directory / "tasks.db")
        try:
            blocker.execute("BEGIN IMMEDIATE")
            hand_back.hand_back()
        finally:
            blocker.close()
    finally:
        queue.close()
    err = capsys.readouterr().err
    assert "could not hand task 0 back: task queue database" in err and "database is locked" in err, err
    assert _safe(err) and len(err.splitlines()) == 1, err
