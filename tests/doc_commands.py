"""The commands README.md and docs/*.md show, found with their file:line (issue docs13).

Fenced ``bash``/``sh``/``console`` blocks, unlabelled blocks (synopses), docs/cli.md's
command table and inline code spans (a span may go on over a line break); each is split into
its program and arguments, placeholders replaced by ``PLACEHOLDERS``' values, a synopsis'
``[optional]`` groups and ``a|b`` choices each a command of its own. tests/test_docs_commands.py
checks them against the code.

``python -m tests.doc_commands`` prints the inventory: every command, where it is, how
tests/test_docs_commands.py checks it, and which test runs it as written today.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
import shlex
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
AFTER_FLAG = {("--port", "P"): "8080", ("--prefix", "P"): "train/"}
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


# ---------------------------------------------------------------- parsing


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


# ---------------------------------------------------------------- the inventory


# (doc, section, the test that runs the section's first shell block as written)
BLOCK_TESTS = (
    ("README.md", "## A tour", "tests/cli/test_tour.py"),
    ("docs/labelx.md", "## Run it", "tests/labelx/test_doc_commands.py"),
    ("docs/quickstart.md", "## Try it", "tests/browser/test_newuser_commands.py"),
    ("docs/quickstart.md", "## Your own data", "tests/browser/test_newuser_commands.py"),
    ("docs/quickstart.md", "## Serving beyond this machine", "tests/browser/test_newuser_commands.py"),
    ("docs/fuse.md", "## Use", "tests/test_docs_commands.py"),
    ("docs/cache.md", "## Operations", "tests/test_docs_commands.py"),
    ("docs/cli.md", "## Journal prefixes in the shared tier", "tests/cli/test_journals17.py"),
    ("docs/cli.md", "## API tokens", "tests/cli/test_gaps26_tokens.py"),
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
        blocks.append((re.search(r"```(?:bash|sh)?\n(.*?)```", section, re.S).group(1), test))
    return {
        " ".join(part.split()): test
        for block, test in blocks
        for line in block.splitlines()
        for part in split_commands(line)
    }


CHECKED_AS = {"datahub": "parsed", "fuse_adapter": "parsed", "csi": "parsed", "make": "make -n"}
CHECKED_AS |= {"module": "module exists, --help flags", "script": "file exists, --help flags"}


def _checked_as(parsed: list[Command]) -> str:
    if not parsed:
        return "-"
    return "paths exist" if parsed[0].target == "pytest" else CHECKED_AS.get(parsed[0].program, "-")


def inventory() -> str:
    """Every command the docs show: where, fenced or inline, how this module checks it, and
    which test runs it today (or only holds its exact text)."""
    runs = _run_by_doc_tests()
    sources = {
        p: p.read_text()
        for p in (REPO / "tests").rglob("*.py")
        if p.name not in ("test_docs_commands.py", "doc_commands.py")
    }
    rows, per_doc = [], {}
    for doc in doc_files():
        for shown, parsed in doc_commands(doc):
            if " ".join(shown.text.split()) in runs:
                today = f"run by {runs[' '.join(shown.text.split())]}"
            else:
                holder = next((p for p, text in sources.items() if shown.text in text), None)
                today = f"text in {holder.relative_to(REPO)}" if holder else ""
            how = "history" if doc == HISTORY else _checked_as(parsed)
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
