"""External merge sort of source items by key, bounded in bytes.

A manifest may list millions of objects in any order, while the import merge needs them
in key order. Items are buffered up to ``budget_bytes`` (estimated by their JSON size),
sorted, written to a temporary run file, and the runs are merged lazily with heapq.
"""

from __future__ import annotations

import heapq
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack

from datahub.ingest.items import SourceItem

DEFAULT_BUDGET_BYTES = 32 * 1024**2


def sorted_items(
    items: Iterable[SourceItem], *, budget_bytes: int = DEFAULT_BUDGET_BYTES, tmp_dir: str | None = None
) -> Iterator[SourceItem]:
    """Yield ``items`` in key order (ties keep input order) using at most ~budget_bytes of RAM."""
    with ExitStack() as stack:
        runs: list[str] = []
        buffer: list[SourceItem] = []
        used = 0
        for item in items:
            buffer.append(item)
            used += len(item.key) + len(item.url) + 200
            if used >= budget_bytes:
                runs.append(_write_run(buffer, tmp_dir, stack))
                buffer, used = [], 0
        if not runs:
            buffer.sort(key=_sort_key)
            yield from buffer
            return
        if buffer:
            runs.append(_write_run(buffer, tmp_dir, stack))
        del buffer
        streams = [_read_run(path, stack) for path in runs]
        yield from heapq.merge(*streams, key=_sort_key)


def _sort_key(item: SourceItem) -> tuple[str, int]:
    return item.key, item.line or 0


def _write_run(buffer: list[SourceItem], tmp_dir: str | None, stack: ExitStack) -> str:
    buffer.sort(key=_sort_key)
    fd, path = tempfile.mkstemp(prefix="datahub-import-run-", suffix=".jsonl", dir=tmp_dir)
    stack.callback(_unlink, path)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        for item in buffer:
            fh.write(item.to_json() + "\n")
    return path


def _read_run(path: str, stack: ExitStack) -> Iterator[SourceItem]:
    fh = stack.enter_context(open(path, encoding="utf-8"))  # noqa: SIM115 - closed by the stack
    return (SourceItem.from_json(line) for line in fh)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
