"""``datahub commit DATASET --changes FILE.jsonl``: a change set file becomes the next version.

Each line is one change, in the same JSON the HTTP API takes:
``{"op": "put", "record": {...}}``, ``{"op": "delete", "key": …}``,
``{"op": "patch", "key": …, "labels": {…}, "meta": {…}}``. The file is parsed once, streamed
into one atomic commit: a bad line (the error names it) aborts the commit with nothing written.
Chunks of plain put lines are checked whole and, on SQLite, inserted from their text
(``datahub.catalog.put_lines``); every other line is parsed as before.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shlex
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TextIO

from datahub.cli.interruptible_read import open_text
from datahub.console.context import CliContext, author_or_default
from datahub.console.numbers import at_least
from datahub.errors import InvalidInput
from datahub.words import counted as in_words

if TYPE_CHECKING:
    from datahub.catalog.model import Change
    from datahub.catalog.put_lines import PutLines


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("commit", help="commit a JSON-lines change set (put/delete/patch) as a new version")
    p.add_argument("dataset", metavar="DATASET", help="a dataset's name (not DATASET@REF)")
    p.add_argument(
        "--changes",
        required=True,
        metavar="FILE.jsonl",
        help="one change a line: put, delete or patch (docs/cli.md)",
    )
    p.add_argument(
        "--base", type=at_least(0), default=None, help="version the changes apply to (default: head)"
    )
    p.add_argument("-m", "--message", default="", help="the new version's message")
    p.add_argument("--author", default=None, help="default: the current user")
    p.add_argument("--commit-id", default=None, help="idempotency key: a retry returns the same version")
    p.set_defaults(func=run)


class ReadProgress:
    """A line on stderr every ``every`` seconds while a change set is read into a commit.

    Why: a commit of 10^8 changes runs for many minutes in one transaction; without a line
    now and then it cannot be told from a hung one. Commits shorter than ``every`` print
    nothing. The figures are what was read and handed to the catalog (it writes behind)."""

    def __init__(self, path: str, stream: TextIO, every: float = 10.0) -> None:
        self.path, self.stream, self.every = path, stream, every
        self.lines = self.chars = 0
        self._start = self._last = time.monotonic()
        try:
            self._size = os.stat(path).st_size if os.path.isfile(path) else 0
        except OSError:
            self._size = 0

    def __call__(self, lines: int, chars: int) -> None:
        self.lines += lines
        self.chars += chars
        now = time.monotonic()
        if now - self._last < self.every:
            return
        self._last = now
        rate = self.lines / (now - self._start)
        of = f" of {self._size / 2**20:,.0f}" if self._size else ""
        print(
            f"commit: {self.lines:,} lines read from {self.path} "
            f"({self.chars / 2**20:,.0f}{of} MiB, {rate:,.0f} lines/s, {now - self._start:,.0f} s)",
            file=self.stream,
            flush=True,
        )


def read_changes(
    path: str, progress: Callable[[int, int], None] | None = None
) -> Iterator[Change | PutLines]:
    """The file's changes, ``CHUNK_LINES`` lines at a time: a chunk of plain put lines as one
    ``PutLines`` (checked whole by ``put_lines``; the SQLite store inserts it from its text),
    any other chunk line by line through the API's change model, which names a bad line.
    ``progress(lines, chars)`` is told of each chunk read."""
    from datahub.catalog.put_lines import CHUNK_LINES, put_lines

    opened = contextlib.ExitStack()
    try:  # a pipe's reads stop at Ctrl-C whenever it comes (datahub.cli.interruptible_read)
        fh = opened.enter_context(open_text(path))
    except OSError as exc:
        raise InvalidInput(f"cannot read change set {path}: {exc.strerror}", path=path) from exc
    with opened:
        number = 0
        while lines := list(itertools.islice(fh, CHUNK_LINES)):
            if progress is not None:
                progress(len(lines), sum(map(len, lines)))
            chunk = put_lines(lines)
            if chunk is not None:
                number += len(lines)
                yield chunk
                continue
            for line in lines:
                number += 1
                if line.strip():
                    yield _parse_line(path, number, line)


def _parse_line(path: str, number: int, line: str) -> Change:
    from pydantic import ValidationError

    from datahub.api.schemas import change_adapter, to_change

    try:
        return to_change(change_adapter().validate_json(line))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        if first["type"] == "json_invalid":  # it read "line 1: : Invalid JSON: … at line 1 column 2"
            error = str((first.get("ctx") or {}).get("error", first["msg"]))
            why = f"not valid JSON ({error.replace(' at line 1 column ', ' at column ')})"
        elif first["type"] in ("union_tag_not_found", "union_tag_invalid"):
            # pydantic's "Unable to extract tag using discriminator 'op'" and "Input tag 'frob'
            # found using 'op' does not match any of the expected tags: …" (newuser36)
            given = (first.get("ctx") or {}).get("tag")
            what = 'no "op"' if given is None else f"op {given!r} is none of put, delete, patch"
            why = (
                f"{what}: each line is one change, "
                '{"op": "put", "record": {…}}, {"op": "delete", "key": …} or {"op": "patch", "key": …, …}'
            )
        else:
            why = f"{where}: {first['msg']}" if where else first["msg"]
        raise InvalidInput(f"change set {path} line {number}: {why}", path=path, line=number) from None


def _base_instead(name: str, ref: str, changes: str) -> str:
    """What to type for ``datahub commit pets@v2 …`` (newuser19: "invalid dataset name
    'pets@v2'", as if the name were wrong): the version goes to ``--base``."""
    seq = ref[1:] if ref[:1] == "v" else ref
    if seq.isascii() and seq.isdigit():
        return f"`datahub commit {name} --changes {shlex.quote(changes)} --base {seq}` applies them to v{seq}"
    return f"`datahub commit {name} --changes {shlex.quote(changes)}` applies them to its head (--base takes a number)"


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.cli.version_cmd import dataset_only

    dataset_only(args.dataset, "commit", lambda name, ref: _base_instead(name, ref, args.changes))
    # One pass: a bad line raises inside the commit, which then writes nothing (the catalog's
    # all-or-nothing rule), so the file is parsed once, not once to check and once to commit.
    changes = read_changes(args.changes, None if ctx.json_output else ReadProgress(args.changes, ctx.err))
    first = next(changes, None)
    if first is None:
        raise InvalidInput(f"change set {args.changes} is empty; nothing to commit", path=args.changes)
    from datahub.catalog.put_lines import PutLines

    count = 0

    def counted() -> Iterator[Change | PutLines]:
        nonlocal count
        for change in itertools.chain((first,), changes):
            count += len(change) if isinstance(change, PutLines) else 1
            yield change

    version = ctx.catalog.commit(
        args.dataset,
        counted(),
        base=args.base,
        message=args.message,
        author=author_or_default(args.author),
        commit_id=args.commit_id,
    )
    from datahub.catalog.public import version_row

    data = version_row(version)
    # what the version changed against its parent, as `import` and `derive` say it: the count of
    # lines alone ("1 changes") said nothing of what they did (a put of an unchanged record, a
    # delete of a missing key change nothing)
    parent = f"v{version.parent}" if version.parent else "v0 (empty)"
    ctx.emit(
        data,
        text=f"committed {version.dataset}@v{version.seq} ({in_words(version.record_count, 'record')}) "
        f"from {in_words(count, 'change')}: {version.added} added, {version.removed} removed, "
        f"{version.modified} modified against {parent}",
    )
    return 0
