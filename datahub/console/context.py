"""What every CLI handler gets: the Config (built once), lazily opened services, and output.

Services are opened on first use so ``datahub --help`` or a cache command never touches
the catalog, and closed once at exit.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from datahub.errors import DatahubError, InvalidInput, NotFound
from datahub.validation import visible

if TYPE_CHECKING:  # the config (pydantic) is imported when a command runs, not for `--help`
    from datahub.config import Config


@dataclass
class CliContext:
    config: Config
    json_output: bool = False
    # commands that make a catalog where none is (init, import, serve, dataset/token create):
    # every other command only reads one, and a home without it is a mistake to report
    creates_catalog: bool = True
    command: str = "datahub"  # how this user runs datahub, for the commands messages name (invoked_as)
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    _closers: list[Callable[[], None]] = field(default_factory=list)
    _services: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CliContext:
        from datahub.config import load_config

        overrides: dict[str, Any] = {}
        if getattr(args, "home", None):
            overrides["home"] = args.home
        if getattr(args, "catalog", None):
            overrides["catalog_url"] = args.catalog
        return cls(
            load_config(getattr(args, "config", None), overrides=overrides),
            json_output=args.json,
            creates_catalog=getattr(args, "creates_catalog", False),
            command=invoked_as(args),
        )

    # --- services ------------------------------------------------------------------------------
    def service(
        self, name: str, factory: Callable[[], Any], close: Callable[[Any], None] | None = None
    ) -> Any:
        """Open a service once (catalog, stores, cache …) and close it at exit."""
        if name not in self._services:
            obj = factory()
            self._services[name] = obj
            closer = close or getattr(obj, "close", None)
            if closer is not None:
                self._closers.append((lambda o=obj, c=closer: c(o)) if close else closer)
        return self._services[name]

    @property
    def catalog(self):  # -> datahub.catalog.Catalog
        from datahub.catalog import open_catalog

        return self.service(
            "catalog", lambda: open_catalog(self.existing_catalog_url(), retry=self.config.catalog)
        )

    def existing_catalog_url(self) -> str:
        """The catalog URL, checked first for a command that only reads a catalog: an SQLite
        file that is not there is an error naming where it was looked for, instead of a new
        empty catalog (and the whole ``--home`` tree) made by ``datahub dataset list``."""
        url = self.config.resolved_catalog_url
        if self.creates_catalog and url.startswith("sqlite:///"):
            create_home(self.config)
        if self.creates_catalog or not url.startswith("sqlite:///"):
            return url
        path = Path(url[len("sqlite:///") :])
        if not path.exists():
            from datahub.config import init_command

            raise NotFound(
                f"no catalog at {path} (home {self.config.home_path}): this command reads an existing "
                "catalog; point at yours with --home DIR (the directory holding catalog.db), --catalog URL, "
                f"$DATAHUB_HOME or datahub.toml, or create one there with `{init_command(self.config, path)}`"
                + self._home_passed_over()
            )
        return url

    def _home_passed_over(self) -> str:
        """The catalog $DATAHUB_HOME names, when --home (or a configuration file) chose another
        home: ``DATAHUB_HOME=DIR make run`` and then the quickstart's ``--home var`` read an empty
        ./var, and the message listed $DATAHUB_HOME among the ways to point at a catalog as if it
        were not set (newuser26)."""
        named = os.environ.get("DATAHUB_HOME")
        if (
            not named
            or self.config.resolved_catalog_url != f"sqlite:///{self.config.home_path / 'catalog.db'}"
        ):
            return ""  # not set, or --catalog chose the catalog
        home = Path(named).expanduser().resolve()
        if home == self.config.home_path.resolve() or not (home / "catalog.db").is_file():
            return ""
        return (
            f"; $DATAHUB_HOME is {home}, which holds a catalog, but --home (or a configuration file) "
            f"chose {self.config.home_path}: run without --home, or with --home {home}"
        )

    @property
    def stores(self):  # -> datahub.storage.StoreRegistry
        from datahub.storage import StoreRegistry

        return self.service("stores", lambda: StoreRegistry(self.config))

    def close(self) -> None:
        while self._closers:
            try:
                self._closers.pop()()
            except Exception:  # closing must not mask the real outcome
                pass

    # --- output --------------------------------------------------------------------------------
    def emit(self, data: Any, *, columns: Sequence[str] | None = None, text: str | None = None) -> None:
        """Print ``data`` as JSON with --json, else as a table (list of dicts) or ``text``."""
        if self.json_output:
            json.dump(data, self.out, indent=None if isinstance(data, list) else 2, default=str)
            self.out.write("\n")
        elif text is not None:
            print(shown_lines(text), file=self.out)
        elif isinstance(data, list):
            print_table(data, columns, self.out)
        elif isinstance(data, dict):
            width = max((len(k) for k in data), default=0)
            for k, v in data.items():  # as a table's cells show them: dates, JSON, "-"
                print(f"{k:<{width}}  {_cell(v)}", file=self.out)
        else:
            print(shown_lines(str(data)), file=self.out)

    def emit_lines(self, rows: Iterable[dict], columns: Sequence[str]) -> int:
        """Stream rows (NDJSON with --json, aligned-enough columns otherwise); returns the count."""
        n = 0
        for row in rows:
            if self.json_output:
                self.out.write(json.dumps(row, default=str) + "\n")
            else:
                self.out.write("  ".join(shown(str(row.get(c, ""))) for c in columns) + "\n")
            n += 1
        return n

    def error(self, exc: DatahubError) -> None:
        print_error(exc, self.err, json_output=self.json_output, command=self.command)

    def progress(self, total: int | None, label: str) -> Progress:
        return Progress(total, label, self.err, enabled=not self.json_output)


def create_home(config: Config, choose: str = "--home DIR or $DATAHUB_HOME") -> None:
    """Create the state directory (``config.home_path``); a system that refuses it (a path on a
    read-only or missing mount, no permission) is InvalidInput naming it and how to choose
    another (``choose``), not "a datahub bug" and a traceback."""
    try:
        config.home_path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        # a file there said "File exists", as if the directory were there and fine (newuser36)
        why = "it is a file, not a directory" if config.home_path.is_file() else exc.strerror
        raise InvalidInput(
            f"cannot create the state directory {config.home_path}: {why}; choose another with {choose}",
            home=str(config.home_path),
        ) from None


def print_error(exc: DatahubError, stream: TextIO, *, json_output: bool, command: str = "datahub") -> None:
    """An error as the CLI shows it: one ``error: …`` line, or ``{"error": …}`` with ``--json``.
    ``command``: how this user runs datahub (``invoked_as``); a command the message names in
    backticks (```datahub log pets```) is shown so, as it runs (the JSON keeps the message)."""
    if json_output:
        json.dump({"error": exc.to_dict()}, stream)
        stream.write("\n")
    else:  # one line, whatever a message quotes (a holder, a server's words)
        print(f"error: {shown(as_typed(exc.message, command))}", file=stream)


_LOCATION_FLAGS = ("config", "home", "catalog")  # the global options that say which catalog


def invoked_as(args: argparse.Namespace, program: str | None = None) -> str:
    """``datahub`` as this user types it here: the program as invoked when no ``datahub`` on
    PATH is that program (``.venv/bin/datahub`` after ``make run``), with the options given
    that say which catalog (``--home var``); else ``datahub`` with those options. Why: the
    quickstart's ``.venv/bin/datahub --home var tag sample golden 2`` said "see `datahub log
    sample`", and typed so that said "datahub: command not found" (newuser25); and with
    ``datahub`` on PATH, ``datahub --home /data/dh log nope`` said "check `datahub dataset
    list`", which typed so read ./var: "no catalog at var/catalog.db" (newuser34)."""
    import shlex
    import shutil

    program = sys.argv[0] if program is None else program
    if os.path.basename(program) != "datahub":  # python -m datahub.cli.main, a test's main()
        return "datahub"
    flags = [f"--{n} {shlex.quote(str(v))}" for n in _LOCATION_FLAGS if (v := getattr(args, n, None))]
    found = shutil.which("datahub")
    try:
        if found is not None and os.path.samefile(found, program):
            program = "datahub"
    except OSError:
        pass
    return " ".join([program if program == "datahub" else shlex.quote(program), *flags])


def as_typed(message: str, command: str) -> str:
    """``message`` with each command it names in backticks (```datahub log pets```) as
    ``command`` runs it; one that gives its own location options keeps them, not ours twice."""
    if command == "datahub":
        return message
    program = command.split(" --", 1)[0]

    def replace(match: re.Match) -> str:
        return f"`{program} --" if match.group(1) else f"`{command} "

    return re.sub(r"`datahub (--)?", replace, message)


def author_or_default(given: str | None) -> str:
    """The author a command records: ``--author`` if given, else the login name.

    One rule for every command that makes a version (import, commit, pack, filter), so
    ``datahub log`` names the same person whichever made it. ``getpass`` falls back from
    $USER/$LOGNAME to the password database, so cron jobs and containers without $USER still
    record someone; a uid with no name is recorded as ``uid:N``.
    """
    if given is not None:
        return given
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid:{os.getuid()}"


def print_table(rows: list[dict], columns: Sequence[str] | None, out: TextIO) -> None:
    if not rows:
        print("(none)", file=out)
        return
    columns = list(columns or rows[0].keys())
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(), file=out)
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip(), file=out)


# C0, DEL and C1: terminals act on U+009B (CSI) and U+009D (OSC) as on ESC [ and ESC ] (review18c)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    r"""Text for a person's terminal: control characters written as ``\x1b`` (an escape
    sequence in a commit message must not clear or recolour the screen, a newline must not
    break a table row) and invisible format characters as ``⟨U+202E⟩`` (a key stored before
    the bidi rule must not display as another key). ``--json`` output keeps the exact text."""
    return visible(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


def shown_lines(text: str) -> str:
    """``shown`` for text the CLI lays out in lines itself (``emit(text=...)``): its newlines
    stay, every other control character is written out. Why not callers alone: one that
    forgot to ``shown()`` a catalog string let an escape sequence reach the terminal; a
    newline inside such a string is the caller's to ``shown()``, as only it knows."""
    return "\n".join(shown(line) for line in text.split("\n"))


def _cell(value: Any) -> str:
    return shown(_cell_text(value))


def _cell_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value > 1e9:  # a timestamp: in UTC and saying so, as the browser
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value)) or "-"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True) if value else "-"
    return str(value)


class Progress:
    """A one-line progress bar on stderr for long work (import, prefetch, pack, flush).

    Redraws at most 10 times a second; on a non-terminal it prints a line every 10 %, the
    last one (100 %) only once, by ``close`` with how the work ended. Workers of several
    threads may call ``update`` (a prefetch's do): each line is written whole, under a lock,
    so lines never run into each other and the counts never go back (newuser19: a prefetch
    printed "1/300 (0%) … prefetch sample@v2: 30/300 (10%) …" on one line, blank lines, and a
    20 % line after the 100 % one).

    Work that fails before its first ``update`` prints no line at all: the command was refused
    (a missing user, a 409 from LabelX's commit, a bad URL) and only the error follows. Each
    command had moved its checks above the bar instead, and every new refusal inside the work
    printed "committing P: 0/12 (0%) … stopped by an error" again (newuser16, 22, 27, 28).
    """

    def __init__(self, total: int | None, label: str, stream: TextIO, enabled: bool = True) -> None:
        self.total, self.label, self.stream, self.enabled = total, label, stream, enabled
        self.done = 0
        self.bytes = 0
        self._start = time.monotonic()
        self._last = 0.0
        self._last_decile = -1
        self._tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self._lock = threading.Lock()
        self._begun = False  # an update came: the work started (refused before it: no line)

    def update(self, n: int = 1, nbytes: int = 0) -> None:
        with self._lock:
            self.done += n
            self.bytes += nbytes
            self._begun = True
            if not self.enabled:
                return
            now = time.monotonic()
            if self._tty:
                if now - self._last >= 0.1:
                    self._last = now
                    self.stream.write("\r" + self._line(now))
                    self.stream.flush()
            elif self.total and self.done < self.total:  # the 100 % line is close()'s
                decile = int(10 * self.done / self.total)
                if decile != self._last_decile:
                    self._last_decile = decile
                    self.stream.write(self._line(now) + "\n")  # one write: a whole line

    def _line(self, now: float) -> str:
        elapsed = max(now - self._start, 1e-9)
        rate = self.done / elapsed
        # bytes only for work that counts them (a migration's rows carry none: "0.0 MiB" misled)
        mib = f" {self.bytes / 2**20:,.1f} MiB" if self.bytes else ""
        if self.total:
            pct = 100 * self.done / self.total
            eta = f"{(self.total - self.done) / rate:,.0f}s" if rate else "?"  # no rate yet: unknown, not 0
            return f"{self.label}: {self.done:,}/{self.total:,} ({pct:.0f}%) {rate:,.0f}/s{mib} eta {eta} "
        return f"{self.label}: {self.done:,} {rate:,.0f}/s{mib} "

    def close(self, *, failed: bool = False, interrupted: bool = False, reader_left: bool = False) -> None:
        """End the line: ``done``, ``stopped by an error`` when the work raised (the error
        follows on the next line; a line saying "done" above it told the user the opposite),
        ``interrupted`` by Ctrl-C (no error: the user stopped it), or ``stopped: its reader
        closed the output`` (``datahub export … | head``: no error either, and none follows;
        it said "stopped by an error", newuser31). Failed before any ``update``: nothing, the
        error alone says why the command was refused."""
        if failed and not interrupted and not self._begun:
            return
        if self.enabled:
            end = (
                " interrupted\n"
                if interrupted
                else " stopped: its reader closed the output\n"
                if reader_left
                else " stopped by an error\n"
                if failed
                else " done\n"
            )
            with self._lock:
                self.stream.write(("\r" if self._tty else "") + self._line(time.monotonic()).rstrip() + end)
                self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        reader_left = exc_type is not None and issubclass(exc_type, BrokenPipeError)
        self.close(failed=exc_type is not None, interrupted=interrupted, reader_left=reader_left)
