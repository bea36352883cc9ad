"""The progress lines of work done by several threads (newuser19).

``datahub prefetch sample@latest`` with stderr not a terminal (a log, CI) printed::

    prefetch sample@v2: 1/300 (0%) 89/s eta 3s prefetch sample@v2: 30/300 (10%) 2,548/s eta 0s …
    (blank lines)
    prefetch imagenet@v1: 20/20 (100%) 1,279/s eta 0s
    prefetch imagenet@v1: 4/20 (20%) 265/s eta 0s
    prefetch imagenet@v1: 20/20 (100%) 155/s eta 0s done

The prefetch's workers call ``Progress.update`` from their threads; ``print`` wrote each line
and its newline in two writes, between which other threads wrote theirs, and the count was
read and the line written outside any lock. The 100 % line was printed twice, by the last
update and by ``close``.
"""

from __future__ import annotations

import re
import sys
import threading

from datahub.console.context import Progress

LINE = re.compile(r"prefetch ds@v1: ([\d,]+)/4,000 \((\d+)%\) [\d,]+/s eta \S+ ?( done)?")


class Writes:
    """A stream that keeps each ``write`` call apart (not a terminal)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_lines_from_many_threads_are_whole_in_order_and_the_last_is_said_once() -> None:
    out = Writes()
    progress = Progress(4000, "prefetch ds@v1", out)
    start = threading.Barrier(4)

    def work() -> None:
        start.wait()
        for _ in range(1000):
            progress.update(1)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: races show
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    progress.close()

    assert all(call.endswith("\n") and call.count("\n") == 1 for call in out.calls), out.calls
    lines = "".join(out.calls).splitlines()
    parsed = [LINE.fullmatch(line) for line in lines]
    assert all(parsed), lines
    counts = [int(m.group(1).replace(",", "")) for m in parsed]
    assert counts == sorted(counts), lines  # never a 20 % line after the 100 % one
    assert [m.group(2) for m in parsed] == [str(p) for p in range(0, 101, 10)], lines  # each decile once
    assert counts[-1] == 4000 and parsed[-1].group(3) == " done", lines  # every update counted


def test_a_single_thread_says_100_percent_once_with_how_it_ended() -> None:
    out = Writes()
    with Progress(10, "pack shards", out) as progress:
        for _ in range(10):
            progress.update(1)
    lines = "".join(out.calls).splitlines()
    assert [line for line in lines if "(100%)" in line] == [lines[-1]], lines
    assert lines[-1].startswith("pack shards: 10/10 (100%) ") and lines[-1].endswith(" done"), lines
