"""Helpers of the CLI tests that run a real ``datahub`` process and interrupt it."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def child_env() -> dict[str, str]:
    """A child's environment: this checkout importable, a fault handler (SIGABRT prints every
    thread's stack), and no ``DATAHUB_CONFIG`` of the caller's (the child's ``--home`` rules)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1"}
    env.pop("DATAHUB_CONFIG", None)
    return env


def start_interruptible(cmd: list[str], cwd: Path) -> subprocess.Popen:
    """``cmd`` started as a terminal's Ctrl-C finds it: SIGINT at its default (a shell's
    background job starts with it ignored), its output captured as text."""
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=child_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def ended(proc: subprocess.Popen, guard: float, hung: str) -> tuple[str, str]:
    """``proc``'s (stdout, stderr) once it ends. Not within ``guard`` seconds (a hang guard,
    never a timing goal): the test fails with ``hung`` and the child's threads' stacks."""
    try:
        return proc.communicate(timeout=guard)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: where it waits
        _, err = proc.communicate(timeout=60)
        pytest.fail(f"{hung}; its threads:\n{err[-8000:]}")
