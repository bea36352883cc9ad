"""No DataLoader worker outlives its test: an autouse fixture for the modules that start them.

Why: a DataLoader whose workers outlive their test is ended later by the cycle collector (an
error's traceback holds its iterator), inside whichever test the collection falls in. torch's
shutdown then could find its index queues already closed by their own finalizers: no worker
got its stop and each join waited out 5 s, 5 to 10 s of another test's wall in a ``make test``
worker (docs/benchmarks.md, "suite71"). A test ends its loaders' workers itself
(``end_workers``).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterable, Iterator
from typing import Any

import pytest


def end_workers(iterator: Any) -> None:
    """End a DataLoader iterator's workers now, as its ``__del__`` would (a no-op when its
    pass ended them already): the one step torch gives for it, ``_shutdown_workers``."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def read_all(loader: Iterable[Any]) -> list[Any]:
    """Every item of ``loader``; its workers ended before this returns or raises."""
    it = iter(loader)
    try:
        return list(it)
    finally:
        end_workers(it)


@pytest.fixture(autouse=True)
def no_worker_outlives_its_test() -> Iterator[None]:
    before = {p.pid for p in multiprocessing.active_children()}
    yield
    left = [p for p in multiprocessing.active_children() if p.pid not in before]
    assert not left, (
        f"{len(left)} worker process(es) of this test still run ({', '.join(p.name for p in left)}):"
        " end its DataLoader's workers before the test returns (tests/loader_workers.py: a loader"
        " iterated to its end ends them itself, one left by an error does not)"
    )
