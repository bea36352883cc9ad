"""Label class counts and a size histogram of a version (or a folder of it), as SVG geometry.

Charts never read a whole version: they summarise at most ``SAMPLE`` records of the prefix
and filter shown, and say so when there were more. They are images of their own (``/charts/
labels.svg``, ``sizes.svg``), so a version page's first byte never waits for a summary.
Versions are immutable, so a summary is kept per (dataset, version, prefix, filter) in a
small LRU and costs nothing the second time.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from datahub.catalog.model import Record

SAMPLE = 10_000
TOP_VALUES = 12
LABEL_FIELDS = 3
SIZE_BARS = 16  # the histogram's bars at most; smaller sizes are counted in its first bar
BAR_W, BAR_H, LABEL_W, CHART_W = 240, 18, 150, 460


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    count: int
    width: int  # pixels
    y: int


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    bars: tuple[Bar, ...]
    height: int
    width: int = CHART_W
    label_width: int = LABEL_W

    @property
    def summary(self) -> str:
        """The chart as text (the image's alternative text)."""
        return f"{self.title}: " + ", ".join(f"{b.label} {b.count}" for b in self.bars)


@dataclass(frozen=True, slots=True)
class Summary:
    records: int  # how many records were summarised
    truncated: bool  # True when the prefix/filter holds more than SAMPLE records
    labels: tuple[Chart, ...]
    sizes: Chart | None


def _bars(pairs: list[tuple[str, int]]) -> tuple[Bar, ...]:
    top = max((c for _, c in pairs), default=1) or 1
    return tuple(
        Bar(label, c, max(1, round(BAR_W * c / top)), i * (BAR_H + 6)) for i, (label, c) in enumerate(pairs)
    )


def _chart(title: str, pairs: list[tuple[str, int]]) -> Chart:
    bars = _bars(pairs)
    return Chart(title, bars, max(1, len(bars)) * (BAR_H + 6) + 4)


def _scalar(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None


def records(n: int) -> str:
    """``n`` records as a caption says it: "1 record", "2 records", "10,000 records"."""
    return f"{n:,} record" if n == 1 else f"{n:,} records"


def human_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def summarise(records: Iterable[Record]) -> Summary:
    fields: dict[str, Counter[str]] = {}
    buckets: Counter[int] = Counter()
    n = 0
    truncated = False
    for record in records:
        if n == SAMPLE:
            truncated = True
            break
        n += 1
        buckets[max(record.size, 1).bit_length() - 1] += 1
        if isinstance(record.labels, Mapping):
            for name, value in record.labels.items():
                text = _scalar(value)
                if text is not None:
                    fields.setdefault(name, Counter())[text] += 1
    busiest = sorted(fields.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))[:LABEL_FIELDS]
    labels = tuple(_label_chart(name, counter) for name, counter in busiest)
    sizes = None
    if buckets:
        sizes = _chart("size", _size_bars(buckets))
    return Summary(n, truncated, labels, sizes)


def _label_chart(name: str, counter: Counter[str]) -> Chart:
    """The field's ``TOP_VALUES`` most common values, and one bar for the rest when there are
    more. Why: a field of many distinct values (a score, an id) drew twelve arbitrary values of
    count 1 and never said they were 12 of 10,000 (newuser16)."""
    top = counter.most_common(TOP_VALUES)
    title = f"labels.{name}"
    if len(counter) > len(top):
        rest = sum(counter.values()) - sum(c for _, c in top)
        others = len(counter) - len(top)
        title += f" ({len(top)} most common of {len(counter):,} values)"
        top.append((f"{others:,} other values", rest))
    return _chart(title, top)


def _size_bars(buckets: Counter[int]) -> list[tuple[str, int]]:
    """The histogram's bars, one per power of two from the smallest size to the largest.

    At most ``SIZE_BARS``: when the sizes span more, the first bar starts at 0 B and counts
    every smaller record too, so the bars always add up to the records summarised. Cutting
    the smallest powers off instead dropped those records from a chart that said "of 2
    records" (a 19-byte metrics file beside an 8 MiB checkpoint showed one bar of 1).
    """
    low, high = min(buckets), max(buckets)
    first = max(low, high - SIZE_BARS + 1)
    pairs = [
        (f"{human_size(2**b)} – {human_size(2 ** (b + 1))}", buckets.get(b, 0))
        for b in range(first, high + 1)
    ]
    if first > low:
        below = sum(count for b, count in buckets.items() if b < first)
        pairs[0] = (f"0 B – {human_size(2 ** (first + 1))}", pairs[0][1] + below)
    return pairs


@dataclass(frozen=True, slots=True)
class Panel:
    chart: Chart
    y: int  # top of the bars; the title sits just above


@dataclass(frozen=True, slots=True)
class Figure:
    note: str
    panels: tuple[Panel, ...]
    height: int
    width: int = CHART_W


def figure(summary: Summary, which: str) -> Figure:
    """One image: every label field's counts (``labels``) or the size histogram (``sizes``)."""
    chosen = list(summary.labels) if which == "labels" else [summary.sizes] if summary.sizes else []
    # why the cases: a filter matching nothing said "no records of 0 records" and "no labels to
    # count of 0 records", and a folder of one file "of 1 records" (newuser34)
    counted = records(summary.records)
    note = f"of the first {counted}" if summary.truncated else f"of {counted}"
    if not summary.records:
        note = "no record to count"
    elif not chosen:
        note = "no labels to count " + note if which == "labels" else "no records " + note
    panels, y = [], 26
    for chart in chosen:
        panels.append(Panel(chart, y + 20))
        y += 20 + chart.height + 14
    return Figure(note, tuple(panels), max(y, 40))


class Summaries:
    """An LRU of summaries keyed by immutable (dataset, version, prefix, filter)."""

    def __init__(self, capacity: int = 256) -> None:
        self._items: OrderedDict[tuple, Summary] = OrderedDict()
        self._lock = threading.Lock()
        self.capacity = capacity

    def get(self, key: tuple, make) -> Summary:  # make: () -> Summary
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        made = make()
        with self._lock:
            self._items[key] = made
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return made
