"""Every command the docs show is one the code accepts as written (issue docs13).

README.md and docs/*.md show commands in fenced ``bash``/``sh``/``console`` blocks, in
unlabelled blocks (synopses) and in inline code spans. This module finds each of them, with
its file:line, and checks it against the code without running it:

- ``datahub ...`` (and ``.venv/bin/datahub``, ``labelx SUB`` as docs/cli.md names
  ``datahub labelx SUB``, ``python -m fuse_adapter``, ``python -m csi``) parses with the real
  argument parser of that program: an unknown subcommand, an unknown flag or a bad choice
  fails. A fenced line is a whole command, so a missing required argument fails too; an
  inline span may name a command or a flag in prose (```datahub commit --changes```), so
  only a missing argument is allowed there.
- placeholders (``DATASET``, ``<principal>``, ``…``) are replaced by the values of
  ``PLACEHOLDERS`` before parsing; a synopsis' ``[optional]`` groups and ``a|b`` choices are
  each parsed as a command of their own. A placeholder in angle brackets that is not in the
  table fails the test instead of being skipped.
- ``make TARGET`` names a target of the Makefile, and ``make -n TARGET`` runs;
  ``python -m X`` names a module; ``bench/...py`` and every repository path the docs cite
  exist; their ``--flags`` appear in the program's ``--help``.
- ``datahub --help`` and ``datahub --version`` run for real.

docs/benchmarks.md is inventoried but not checked: each of its sections records what ran at
its own commit and is never edited afterwards.

``python -m tests.test_docs_commands`` prints the inventory: every command, where it is,
and which test runs it today.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import io
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HISTORY = "docs/benchmarks.md"
SHELL_BLOCKS = {"bash", "sh", "console", ""}  # "" = an unlabelled block: synopses, diagrams

# A placeholder the docs use -> a value the parser accepts. Whole words only (``MNT``,
# ``N``); angle placeholders (``<principal>``) must be listed here, or the test fails.
PLACEHOLDERS = {
    "DATASET": "imgs",
    "SRC": "s3://bucket/prefix",
    "SRC@REF": "imgs@v1",
    "DST": "imgs-224",
    "MNT": "/mnt/data",
    "NAME": "alice",
    "USER": "alice",
    "P": "alice",
    "ROLE": "annotator",
    "W": "run-42",
    "BYTES": "1073741824",
    "FILE": "changes.jsonl",
    "FILE.jsonl": "changes.jsonl",
    "DIR": "/var/tmp/dir",
    "ID": "7",
    "N": "2",
    "MSG": "a message",
    "TOKEN_OR_ID": "7",
    "<principal>": "alice",
    "<node>": "node-1",
    "<dir>": "/var/tmp/dir",
    "<key>": "0123456789abcdef",
    "COMMAND": "init",
    "H": "127.0.0.1",
    "TAG": "golden",
    "REF": "v1",
    "FROM": "1",
    "TO": "2",
    "F": "labels.class=cat",
    "A": "alice",
    "D": "a description",
    "URL": "sqlite:///var/tmp/catalog.db",
    "…": "x",  # a flag's value left out (`--home …`)
}
# where one letter means two things: (the flag before it, the placeholder) -> its value there
AFTER_FLAG = {("--port", "P"): "8080"}
ELLIPSIS = {"…", "..."}  # "more of the same": dropped as a word; inside a URL, a prefix
KNOWN_PREFIX = re.compile(r"^(s3://)(…|\.\.\.)$")
REDIRECT = re.compile(r"^\d?>>?(&\d)?")  # `> FILE`, `2>&1`: the shell's, not the command's

# the programs whose real argument parser is importable (``python -m fuse_adapter`` is
# ``datahub`` with only the mount commands)
PARSED = ("datahub", "fuse_adapter", "csi")


@functools.cache
def real_parser(program: str) -> argparse.ArgumentParser:
    """The parser ``program`` itself builds: the real one, never a copy of its flags."""
    if program == "csi":
        from csi.__main__ import build_parser

        return build_parser()
    from datahub.console import runner

    if program == "fuse_adapter":
        from fuse_adapter.__main__ import COMMANDS
    else:
        from datahub.cli.main import COMMANDS
    return runner.build_parser(COMMANDS)


@dataclass(frozen=True)
class Shown:
    """One command as a doc shows it."""

    where: str  # "docs/fuse.md:13"
    text: str  # one command: a line's `;`, `&&` and `|` parts are separate commands
    fenced: bool  # in a code block (a whole command) or an inline span (may be a reference)


@dataclass(frozen=True)
class Command:
    """A shown command, split into its program and arguments (one variant of a synopsis)."""

    shown: Shown
    program: str  # "datahub", "fuse_adapter", "csi", "make", "module", "script", or its name
    target: str  # the module or script for "module"/"script", else ""
    args: tuple[str, ...]


def doc_files() -> list[str]:
    return ["README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))]


# ---------------------------------------------------------------- finding the commands


FENCE = re.compile(r"^\s*```(\w*)\s*$")
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
PROSE_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")  # in a paragraph: may hold a line break
INLINE_START = re.compile(
    r"^((datahub|make|curl|kubectl|(\.venv/bin/)?python3?|\.venv/bin/datahub)( |$)|labelx [a-z]|bench/\S+\.py( |$))"
)
# docs whose command table names subcommands without the program: a row is a whole synopsis
TABLE_PREFIX = {"docs/cli.md": "datahub"}
# spans that start like a command but show its output
NOT_COMMANDS = {"datahub 0.1.0 (commit <sha>)"}


def shown_commands(doc: str) -> list[Shown]:
    """Every command ``doc`` shows: fenced lines (continuations joined) and inline spans."""
    out: list[Shown] = []
    lines = [*(REPO / doc).read_text().splitlines(), ""]
    block: str | None = None
    pending: tuple[int, str] | None = None  # a line continued by `\` or by a synopsis' `[...]`
    prose: list[tuple[int, str]] = []  # the paragraph so far: a code span may go on a line
    for lineno, line in enumerate(lines, 1):
        fence = FENCE.match(line)
        if block is None and (fence or not line.strip()):
            out.extend(_spans(doc, prose))
            prose = []
        if fence:
            if pending:
                out.extend(_fenced(doc, *pending))
                pending = None
            block = None if block is not None else fence.group(1)
            continue
        if block is None and doc in TABLE_PREFIX and line.startswith("| `"):
            cell = line.split(" | ", 1)[0].replace("\\|", "|")
            for span in SPAN.findall(cell):
                out.extend(_fenced(doc, lineno, f"{TABLE_PREFIX[doc]} {span}"))
            continue
        if block is None:
            prose.append((lineno, line))
            continue
        if block not in SHELL_BLOCKS:
            continue
        text = line.strip()
        if block == "" and text.startswith("["):  # a synopsis goes on; its (notes) are not flags
            text = re.sub(r"\s{2,}\(.*\)$", "", text)
        if pending and (pending[1].endswith("\\") or (block == "" and text.startswith("["))):
            pending = (pending[0], pending[1].removesuffix("\\").rstrip() + " " + text)
            continue
        if pending:
            out.extend(_fenced(doc, *pending))
        starts = text and (block != "" or INLINE_START.match(text) or text.startswith("$"))
        pending = (lineno, text) if starts else None  # an unlabelled block's diagram is no command
    return out


def _spans(doc: str, prose: list[tuple[int, str]]) -> list[Shown]:
    """The commands in a paragraph's code spans, each at the line where it starts."""
    if not prose:
        return []
    text, out = "\n".join(line for _, line in prose), []
    for m in PROSE_SPAN.finditer(text):
        span = " ".join(m.group(1).split())
        if INLINE_START.match(span) and span not in NOT_COMMANDS:
            where = f"{doc}:{prose[0][0] + text.count(chr(10), 0, m.start())}"
            out.extend(Shown(where, part, False) for part in split_commands(span))
    return out


def _fenced(doc: str, lineno: int, text: str) -> list[Shown]:
    return [Shown(f"{doc}:{lineno}", part, True) for part in split_commands(text)]


def split_commands(text: str) -> list[str]:
    """``a; b && c | d # note`` -> [a, b, c, d]: outside quotes and ``[...]``; a ``|`` with no
    space beside it (``exif|none``) is a choice, not a pipe."""
    parts, cur, quote, depth, i = [], [], "", 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            break
        elif depth == 0 and (ch == ";" or text.startswith("&&", i) or text.startswith("||", i)):
            parts.append("".join(cur))
            cur = []
            i += 1 if ch == ";" else 2
            continue
        elif depth == 0 and ch == "|" and (text[i - 1 : i].isspace() or text[i + 1 : i + 2].isspace()):
            parts.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


# ---------------------------------------------------------------- reading one command


def variants(text: str) -> list[str]:
    """A synopsis as the commands it stands for: the base (every ``[...]`` group left out),
    then each alternative of each group put in its place (``DATASET[@REF]``, ``[--a | --b]``);
    a word ``a|b|c`` is one command per choice."""
    groups, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            start = i if depth == 1 else start
        elif ch == "]" and depth:
            depth -= 1
            if depth == 0:
                groups.append((start, i + 1))

    def put(chosen: int, alt: str) -> str:
        out, at = [], 0
        for n, (a, b) in enumerate(groups):
            out += [text[at:a], alt if n == chosen else ""]
            at = b
        return " ".join("".join([*out, text[at:]]).split())

    shown = [put(-1, "")]
    for n, (a, b) in enumerate(groups):
        for alt in text[a + 1 : b - 1].split(" | "):
            shown.append(put(n, alt.replace("[", "").replace("]", "")))
    expanded = []
    for cmd in shown:
        words = cmd.split(" ")
        choice = next((i for i, w in enumerate(words) if "|" in w and "://" not in w), None)
        if choice is None:
            expanded.append(cmd)
            continue
        for value in words[choice].split("|"):
            expanded.extend(variants(" ".join([*words[:choice], value, *words[choice + 1 :]])))
    return expanded


def substitute(word: str, before: str) -> list[str]:
    """A placeholder word (``before`` it: the word before) -> its value; ``…`` alone -> nothing
    ("and so on"), or a value where a flag's value stands (``--home …``); ``DIR...`` -> ``DIR``."""
    if (before, word) in AFTER_FLAG:
        return [AFTER_FLAG[before, word]]
    if word in ELLIPSIS:
        return [PLACEHOLDERS["…"]] if before.startswith("-") else []
    word = re.sub(r"(?<=\w)(…|\.\.\.)$", "", word)
    if word in PLACEHOLDERS:
        return [PLACEHOLDERS[word]]
    if KNOWN_PREFIX.match(word):
        return ["s3://bucket/prefix"]
    for name, value in PLACEHOLDERS.items():  # NAME=writer, DATASET@REF, volumes/<key>/mnt
        if name.startswith("<"):
            word = word.replace(name, value)
        elif name.isupper():
            word = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", value, word)
    return [word.replace("@REF", "@v1")]


def commands(shown: Shown, assignments: dict[str, str] | None = None) -> list[Command]:
    """The program and arguments of each variant of ``shown`` (none for a non-command)."""
    out = []
    for text in variants(shown.text):
        for name, value in (assignments or {}).items():
            text = text.replace(f"${{{name}}}", value).replace(f"${name}", value)
        try:
            words = shlex.split(text)
        except ValueError:
            return []
        while words and re.match(r"^[A-Z_]+=", words[0]):  # VAR=value before the command
            words.pop(0)
        words = [
            w
            for i, w in enumerate(words)
            if not REDIRECT.match(w) and not (i and REDIRECT.fullmatch(words[i - 1]))
        ]
        args = [a for i, w in enumerate(words) for a in substitute(w, words[i - 1] if i else "")]
        if not args:
            continue
        first, rest = args[0].removeprefix(".venv/bin/"), args[1:]
        if first in ("python", "python3") and rest[:1] == ["-m"] and len(rest) > 1:
            module, rest = rest[1], rest[2:]
            program = module if module in ("fuse_adapter", "csi") else "module"
            out.append(Command(shown, program, "" if program != "module" else module, tuple(rest)))
        elif first in ("python", "python3") and rest and rest[0].endswith(".py"):
            out.append(Command(shown, "script", rest[0], tuple(rest[1:])))
        elif first.startswith("bench/") and first.endswith(".py"):
            out.append(Command(shown, "script", first, tuple(rest)))
        elif first == "labelx" and rest:  # docs/cli.md's `labelx serve`: `datahub labelx serve`
            out.append(Command(shown, "datahub", "", ("labelx", *rest)))
        else:
            out.append(Command(shown, first, "", tuple(rest)))
    return out


def doc_commands(doc: str) -> list[tuple[Shown, list[Command]]]:
    """Each command ``doc`` shows with what it stands for; a block's
    ``D=".venv/bin/datahub --home var"`` is applied to the ``$D`` lines after it."""
    out = []
    assignments: dict[str, str] = {}
    for shown in shown_commands(doc):
        assign = re.fullmatch(r"([A-Z_]+)=(\"[^\"]*\"|'[^']*'|\S+)", shown.text)
        if assign and shown.fenced:
            assignments[assign.group(1)] = shlex.split(assign.group(2))[0]
        out.append((shown, commands(shown, assignments)))
    return out


def all_commands(docs: list[str]) -> list[Command]:
    return [c for doc in docs for _, cs in doc_commands(doc) for c in cs]


def checked_commands() -> list[Command]:
    return all_commands([d for d in doc_files() if d != HISTORY])


# ---------------------------------------------------------------- checks


def parse_error(program: str, args: tuple[str, ...]) -> str | None:
    """What the program's real parser says of ``args`` (None: it accepts them)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            real_parser(program).parse_args(list(args))
    except SystemExit as exc:
        if exc.code not in (0, None):
            return err.getvalue().strip().splitlines()[-1]
    return None


def test_every_placeholder_in_angle_brackets_is_in_the_table() -> None:
    unknown = [
        f"{c.shown.where}: {word!r} in `{c.shown.text}`"
        for c in checked_commands()
        if c.program in PARSED
        for arg in c.args
        for word in re.findall(r"<[^<>]*>", arg)
    ]
    assert not unknown, "placeholders with no value in PLACEHOLDERS:\n" + "\n".join(unknown)


def names_only(error: str, args: tuple[str, ...]) -> bool:
    """Whether ``error`` only says what an inline span leaves out when prose names a command
    or a flag (```datahub commit --changes```): an argument, or the value of its last flag."""
    if "the following arguments are required" in error:
        return True
    return bool(args) and error.endswith(f"argument {args[-1]}: expected one argument")


def test_every_datahub_command_shown_parses() -> None:
    failures, count = [], 0
    for c in checked_commands():
        if c.program not in PARSED:
            continue
        count += 1
        error = parse_error(c.program, c.args)
        if error and not (not c.shown.fenced and names_only(error, c.args)):
            failures.append(f"{c.shown.where}: `{c.shown.text}` -> {c.program} {' '.join(c.args)}: {error}")
    assert count > 100, f"only {count} datahub commands found: is the extraction broken?"
    assert not failures, "commands the docs show that the CLI rejects:\n" + "\n".join(failures)


def _subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name)
                yield from _subcommands(sub, (*path, name))


def test_every_subcommand_the_cli_has_is_shown_in_the_docs() -> None:
    """The other way round: a command nobody can read about is as wrong as a documented one
    that does not exist."""
    shown = set()
    for c in checked_commands():
        if c.program == "datahub":
            words = [w for w in _without_locations(c.args) if w not in ("--json", "-v")]
            shown.update(tuple(words[:n]) for n in range(1, len(words) + 1))
    missing = [" ".join(path) for path in _subcommands(real_parser("datahub")) if path not in shown]
    assert not missing, "datahub subcommands no doc shows: " + ", ".join(missing)


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return {t for m in re.finditer(r"^([\w. -]+?)\s*:(?!=)", text, re.M) for t in m.group(1).split()}


def test_every_make_target_shown_exists_and_dry_runs() -> None:
    targets = makefile_targets()
    shown = {}
    for c in checked_commands():
        if c.program == "make":
            goals = [a for a in c.args if not a.startswith("-") and "=" not in a]
            shown.setdefault(tuple(goals), c.shown.where)
    missing = [
        f"{where}: make {' '.join(goals)}" for goals, where in shown.items() if not set(goals) <= targets
    ]
    assert not missing, "make targets the Makefile does not have:\n" + "\n".join(missing)
    assert {("run",), ("test",), ("image",)} <= set(shown), sorted(shown)
    for goals in shown:
        done = subprocess.run(["make", "-n", *goals], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{shown[goals]}: make -n {' '.join(goals)}: {done.stderr}"


def test_every_module_shown_exists() -> None:
    missing = [
        f"{c.shown.where}: python -m {c.target}"
        for c in checked_commands()
        if c.program == "module" and importlib.util.find_spec(c.target) is None
    ]
    assert not missing, "modules the docs run that do not exist:\n" + "\n".join(missing)


# paths the docs name on purpose though a checkout does not hold them, and why
NOT_IN_CHECKOUT = {
    "bench/catalog/scale.py": "docs/catalog.md says it was merged into bench/scale/scale.py",
    "datahub/catalog/_put_rows.cpython-311-x86_64-linux-gnu.so": "built by `make install`, quoted from its log",
}


def _uses_argparse(source: Path) -> bool:
    return source.is_file() and "ArgumentParser(" in source.read_text()


def _module_source(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return Path("/nonexistent")
    origin = Path(spec.origin)
    if origin.name == "__init__.py" and (origin.parent / "__main__.py").is_file():
        return origin.parent / "__main__.py"
    return origin


def _help(argv: tuple[str, ...]) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, *argv, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_every_bench_script_and_module_shown_exists_and_takes_its_flags() -> None:
    """A script's flags are read from its ``--help`` (only a script built on argparse is asked:
    another could take ``--help`` for something to do)."""
    missing, programs = [], {}
    for c in checked_commands():
        if c.program == "script":
            if c.target in NOT_IN_CHECKOUT:
                continue
            if not (REPO / c.target).is_file():
                missing.append(f"{c.shown.where}: {c.target} does not exist")
                continue
            source, argv = REPO / c.target, (c.target,)
        elif c.program == "module" and c.target != "pytest":
            source, argv = _module_source(c.target), ("-m", c.target)
        else:
            continue
        flags = {a.split("=", 1)[0] for a in c.args if a.startswith("--")}
        if flags and not _uses_argparse(source):
            missing.append(
                f"{c.shown.where}: `{c.shown.text}` shows flags, but {source.name} has no argparse"
            )
        elif flags:
            programs.setdefault(argv, []).append((c, flags))
    with ThreadPoolExecutor(4) as pool:
        helps = dict(zip(programs, pool.map(_help, programs), strict=True))
    for argv, uses in programs.items():
        rc, text = helps[argv]
        if rc != 0:
            missing.append(f"{' '.join(argv)} --help failed ({rc}): {text[-500:]}")
            continue
        for c, flags in uses:
            for flag in sorted(flags):
                if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
                    missing.append(f"{c.shown.where}: `{c.shown.text}`: {flag} is not in its --help")
    assert not missing, "\n".join(missing)


def test_every_pytest_path_shown_exists() -> None:
    missing = [
        f"{c.shown.where}: {a}"
        for c in checked_commands()
        if c.program == "module" and c.target == "pytest"
        for a in c.args
        if not a.startswith("-") and not (REPO / a.split("::")[0]).exists()
    ]
    assert not missing, "\n".join(missing)


REPO_PATH = re.compile(
    r"(?<![\w/.:@-])((?:datahub|fuse_adapter|csi|labelx|bench|scripts|tests|docs|examples|third_party|requirements)"
    r"/[\w./-]*)"
)


def cited_paths(doc: str) -> Iterator[tuple[str, str]]:
    """(file:line, path) for every repository path ``doc`` names, in code or in prose."""
    for lineno, line in enumerate((REPO / doc).read_text().splitlines(), 1):
        for m in REPO_PATH.finditer(line):
            path = m.group(1).rstrip(".")
            after = line[m.end() : m.end() + 1]
            if after in "*{<…" and after:  # a pattern (`bench/*.py`) or a placeholder, not a path
                continue
            yield f"{doc}:{lineno}", path


def test_every_repository_path_the_docs_cite_exists() -> None:
    missing = [
        f"{where}: {path}"
        for doc in doc_files()
        if doc != HISTORY
        for where, path in cited_paths(doc)
        if path not in NOT_IN_CHECKOUT and not (REPO / path).exists()
    ]
    assert not missing, "paths the docs cite that are not in the repository:\n" + "\n".join(missing)


ROUTE_SPAN = re.compile(r"`(GET|POST|PUT|PATCH|DELETE) ((?:/|…/|\.\.\./)[^`?\s]*)[^`]*`")


def shown_routes(doc: str) -> Iterator[tuple[str, str, str]]:
    """(file:line, method, path) for every ```METHOD /path``` span of ``doc``; a path that
    starts with ``…/`` names a route by its end."""
    for lineno, line in enumerate((REPO / doc).read_text().splitlines(), 1):
        for m in ROUTE_SPAN.finditer(line):
            yield f"{doc}:{lineno}", m.group(1), m.group(2)


def _route_matches(shown: str, route: str) -> bool:
    """``shown``'s segments against a route template's: a ``{x}``/``<x>`` on either side
    stands for any one segment, ``{key:path}`` for the rest; ``…/`` matches the route's end."""
    want, have = shown.split("/"), route.split("/")
    if want[0] in ("…", "..."):
        want = want[1:]
        have = have[-len(want) :] if not have[-1].endswith(":path}") else have
    if have[-1].endswith(":path}") and len(want) >= len(have):
        want = [*want[: len(have) - 1], "{rest}"]
    return len(want) == len(have) and all(
        w == h or re.fullmatch(r"\{[^}]*\}|<[^>]*>", w) or re.fullmatch(r"\{[^}]*\}", h)
        for w, h in zip(want, have, strict=True)
    )


def test_every_api_route_the_docs_show_exists() -> None:
    """The routes of the API (public and internal) and of LabelX, as the code declares them."""
    from datahub.api.routes import ROUTERS
    from labelx.routes import router as labelx_router

    routes = [(m, r.path) for router in (*ROUTERS, labelx_router) for r in router.routes for m in r.methods]
    shown = [row for doc in doc_files() if doc != HISTORY for row in shown_routes(doc)]
    assert len(shown) > 20, shown
    missing = [
        f"{where}: {method} {path}"
        for where, method, path in shown
        if not any(m == method and _route_matches(path, route) for m, route in routes)
    ]
    assert not missing, "routes the docs show that the API does not have:\n" + "\n".join(missing)
    assert not _route_matches("/v1/datasets/{name}/nothing", "/v1/datasets/{name}/diff")
    assert _route_matches("…/tags/v3", "/v1/datasets/{name}/tags/{tag}")


def test_the_cheap_commands_the_docs_show_run() -> None:
    """``datahub --help`` and ``datahub --version`` as a user types them (the console script)."""
    datahub = Path(sys.executable).parent / "datahub"
    shown = {" ".join(c.args) for c in all_commands(doc_files()) if c.program == "datahub"}
    assert {"--help", "--version"} <= shown
    helped = subprocess.run([datahub, "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "usage: datahub" in helped.stdout, helped.stderr
    for name in ("mount", "umount", "labelx", "pack", "cache", "import", "serve"):
        assert re.search(rf"^\s+{name}\s", helped.stdout, re.M), f"datahub --help lists no {name}"
    version = subprocess.run([datahub, "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and re.match(r"datahub \S+ \(commit \S+\)", version.stdout), version


# commands that only read (or, `init`, make) a home: the docs' ones run for real on a new home
READ_ONLY = {
    ("init",),
    ("dataset", "list"),
    ("cache", "stats"),
    ("cache", "pins"),
    ("cache", "flush"),
    ("migrate",),
}
GLOBAL_VALUED = {"--home", "--config", "--catalog"}  # where: the test's own home stands for them


def _without_locations(args: tuple[str, ...]) -> list[str]:
    out, value_next = [], False
    for arg in args:
        if not value_next and arg.split("=", 1)[0] not in GLOBAL_VALUED:
            out.append(arg)
        value_next = not value_next and arg in GLOBAL_VALUED
    return out


def test_the_read_only_commands_the_docs_show_run_on_a_new_home(tmp_path: Path) -> None:
    """Each shown as a user types it, in a directory of its own (so ``./var`` is the home),
    after ``datahub init``; ``--json`` kept, the location flags left to the test's home."""
    runs: dict[tuple[str, ...], str] = {}
    for c in checked_commands():
        if c.program != "datahub":
            continue
        words = _without_locations(c.args)
        rest = tuple(w for w in words if w not in ("--json", "-v"))
        if rest in READ_ONLY:
            runs.setdefault((*rest, *(["--json"] if "--json" in words else [])), c.shown.where)
    assert {("cache", "stats"), ("cache", "stats", "--json"), ("dataset", "list")} <= set(runs), runs
    datahub = Path(sys.executable).parent / "datahub"
    env = {"PATH": f"{datahub.parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    for argv in [("init",), *sorted(runs)]:
        done = subprocess.run(
            [datahub, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        where = runs.get(argv, "first")
        assert done.returncode == 0, f"{where}: datahub {' '.join(argv)} -> {done.returncode}: {done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        if "--json" in argv:
            json.loads(done.stdout)


# ---------------------------------------------------------------- the checks' own checks


def test_the_extraction_finds_what_the_docs_show() -> None:
    """The checks above are only worth something if they see the commands and would fire."""
    found = {c.shown.text: c for c in checked_commands()}
    tour = found["datahub mount --background --workspace run-42 /mnt/out --commit-to outputs"]
    assert tour.shown.fenced and tour.shown.where.startswith("README.md:")
    assert "datahub log imagenet" in found and "datahub ls imagenet@latest --filter labels.class=cat" in found
    pipe = [c for c in checked_commands() if c.shown.text.startswith("$D ls sample@v1")]
    assert pipe and pipe[0].args == ("--home", "var", "ls", "sample@v1", "--filter", "labels.class=cat")
    assert parse_error("datahub", ("mount", "--no-such-flag", "/mnt/x", "ds")) is not None
    assert parse_error("datahub", ("no-such-command",)) is not None
    assert "required" in (parse_error("datahub", ("import", "s3://b/p")) or "")
    assert parse_error("datahub", ("pack", "ds@1", "--to", "x", "--rotate", "sideways")) is not None
    assert variants("datahub x DATASET[@REF] [--a 1 | --b [--c]] --r exif|none") == [
        "datahub x DATASET --r exif",
        "datahub x DATASET --r none",
        "datahub x DATASET@REF --r exif",
        "datahub x DATASET@REF --r none",
        "datahub x DATASET --a 1 --r exif",
        "datahub x DATASET --a 1 --r none",
        "datahub x DATASET --b --c --r exif",
        "datahub x DATASET --b --c --r none",
    ]
    assert split_commands("a 1; b && c | d # e | f") == ["a 1", "b", "c", "d"]


# ---------------------------------------------------------------- the inventory


# (doc, section, the test that runs the section's first shell block as written)
BLOCK_TESTS = (
    ("README.md", "## A tour", "tests/cli/test_tour.py"),
    ("docs/labelx.md", "## Run it", "tests/labelx/test_doc_commands.py"),
    ("docs/quickstart.md", "## Try it", "tests/browser/test_newuser_commands.py"),
    ("docs/quickstart.md", "## Your own data", "tests/browser/test_newuser_commands.py"),
    ("docs/quickstart.md", "## Serving beyond this machine", "tests/browser/test_newuser_commands.py"),
)


def _run_by_doc_tests() -> dict[str, str]:
    """Commands a test reads from the docs and runs: the blocks of BLOCK_TESTS, and the access
    commands of tests/cli/test_access_docs.py."""
    from tests.cli.test_access_docs import DOCS, access_snippets

    blocks = [
        (b.replace("\\\n", " "), "tests/cli/test_access_docs.py") for d in DOCS for b in access_snippets(d)
    ]
    for doc, heading, test in BLOCK_TESTS:
        section = (REPO / doc).read_text().split(heading, 1)[1]
        blocks.append((re.search(r"```(?:bash|sh)\n(.*?)```", section, re.S).group(1), test))
    return {
        part: test for block, test in blocks for line in block.splitlines() for part in split_commands(line)
    }


CHECKED_AS = {"datahub": "parsed", "fuse_adapter": "parsed", "csi": "parsed", "make": "make -n"}
CHECKED_AS |= {"module": "module exists, --help flags", "script": "file exists, --help flags"}


def inventory() -> str:
    """Every command the docs show: where, fenced or inline, how this module checks it, and
    which test runs it today (or only holds its exact text)."""
    runs = _run_by_doc_tests()
    sources = {p: p.read_text() for p in (REPO / "tests").rglob("*.py") if p != Path(__file__).resolve()}
    rows, per_doc = [], {}
    for doc in doc_files():
        for shown, parsed in doc_commands(doc):
            if shown.text in runs:
                today = f"run by {runs[shown.text]}"
            else:
                holder = next((p for p, text in sources.items() if shown.text in text), None)
                today = f"text in {holder.relative_to(REPO)}" if holder else ""
            how = "history" if doc == HISTORY else CHECKED_AS.get(parsed[0].program, "-") if parsed else "-"
            kind = "block " if shown.fenced else "inline"
            rows.append(f"{shown.where:26} {kind} {shown.text[:80]:80} | {how:26} | {today}")
            counts = per_doc.setdefault(doc, [0, 0, 0])
            counts[0] += 1
            counts[1] += how not in ("-", "history")
            counts[2] += today.startswith("run by")
    summary = [
        f"{d:22} {n:4} shown, {c:4} checked here, {r:3} run by a doc test" for d, (n, c, r) in per_doc.items()
    ]
    n, c, r = (sum(col) for col in zip(*per_doc.values(), strict=True))
    return "\n".join(
        [*rows, "", *summary, f"{'all':22} {n:4} shown, {c:4} checked here, {r:3} run by a doc test"]
    )


if __name__ == "__main__":
    print(inventory())
