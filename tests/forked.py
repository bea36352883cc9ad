"""Helpers of the fork tests (fork25 to fork27): a parent and a forked child doing work at once."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

from tests.cache.test_fork25 import in_child

T = TypeVar("T")


def at_once(
    parent_work: Callable[[], list[str]], child_work: Callable[[], bool]
) -> tuple[int | str, list[str]]:
    """Fork a child that runs ``child_work`` (True: all went right) while this process runs
    ``parent_work`` (what went wrong); both start once the child is up. The child's exit code
    (0: True, 2: False, 1: it raised) or "hung", and the parent's list."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()

    def child() -> bool:
        os.write(ready_w, b"r")
        os.read(go_r, 1)
        return child_work()

    outcome: list[int | str] = ["not run"]
    forker = threading.Thread(target=lambda: outcome.__setitem__(0, in_child(child, timeout=120)))
    forker.start()
    try:
        os.read(ready_r, 1)
        os.write(go_w, b"g")
        wrong = parent_work()
    finally:
        forker.join(180)
        for fd in (ready_r, ready_w, go_r, go_w):
            os.close(fd)
    return outcome[0], wrong


def wrong_answers(ask: Callable[[], T], wrong: Callable[[T], str | None], rounds: int) -> list[str]:
    """Ask ``rounds`` times; what went wrong: each exception, and each answer ``wrong``
    describes (None: the right answer). What a parent and a child each run at once."""
    found: list[str] = []
    for _ in range(rounds):
        try:
            got = ask()
        except Exception as exc:  # reported by the test
            found.append(f"{type(exc).__name__}: {exc}")
            continue
        why = wrong(got)
        if why is not None:
            found.append(why)
    return found
