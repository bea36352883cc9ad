"""Every command the docs show is one the code accepts as written (issue docs13).

README.md and docs/*.md show commands in fenced ``bash``/``sh``/``console`` blocks, in
unlabelled blocks (synopses), in docs/cli.md's command table and in inline code spans (a span
may go on over a line break). This module finds each of them, with its file:line, and checks
it against the code:

- ``datahub ...`` (and ``.venv/bin/datahub``, ``$D`` after ``D=".venv/bin/datahub ..."``,
  ``labelx SUB`` as docs/cli.md names ``datahub labelx SUB``, ``python -m fuse_adapter``,
  ``python -m csi``) parses with the real argument parser of that program: an unknown
  subcommand, an unknown flag or a bad choice fails. A fenced line is a whole command, so a
  missing required argument fails too; an inline span may name a command or a flag in prose
  (```datahub commit --changes```), so only what it leaves out is allowed there. The other
  way round, every subcommand the CLI has is shown somewhere.
- placeholders (``DATASET``, ``<principal>``, ``…``) are replaced by the values of
  ``PLACEHOLDERS`` before parsing; a synopsis' ``[optional]`` groups and ``a|b`` choices are
  each parsed as a command of their own. A placeholder in angle brackets that is not in the
  table fails the test instead of being skipped.
- ``make TARGET`` names a target of the Makefile, and ``make -n TARGET`` runs;
  ``python -m X`` names a module; ``bench/...py``, the paths given to pytest and every
  repository path the docs cite exist; shown ``--flags`` appear in the program's ``--help``.
- ``kubectl apply -k DIR`` names a kustomization of the repository; ``METHOD /path`` names
  a route of the API or of LabelX; a ``python`` block is valid Python
  and imports only names datahub's packages have.
- run for real: ``datahub --help``, ``datahub --version``, the shown commands that only read
  a home (``cache stats``, ``dataset list`` ...) on a new home, docs/cache.md's command
  block and docs/fuse.md's "Use" block (real mounts) as written.

docs/benchmarks.md is inventoried but not checked: each of its sections records what ran at
its own commit and is never edited afterwards.

The commands are found by tests/doc_commands.py (``python -m tests.doc_commands`` prints
the inventory).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import zygote
from tests.doc_commands import (
    HISTORY,
    PARSED,
    REPO,
    all_commands,
    checked_commands,
    commands,
    doc_files,
    parse_error,
    real_parser,
    shown_commands,
    split_commands,
    variants,
)

# ---------------------------------------------------------------- checks


def cli_env(**env: str) -> dict[str, str]:
    """``env`` plus this process's ``PYTHON*`` variables (``PYTHONPATH`` aside): a run that
    names only ``PATH`` and ``HOME`` then still fits the worker's zygote (tests/zygote.py,
    ``Zygote.fits``), whose fork starts with the interpreter's imports done."""
    python = {k: v for k, v in os.environ.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}
    return {**python, **env}


def run_cli(
    args: tuple[str, ...] | list[str], *, env: dict[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess:
    """``datahub ARGS``: the console script's ``main`` (``python -m datahub.cli.main``) in a fork
    of the worker's pre-imported interpreter, as tests/cli runs it; the console script itself
    is run by ``test_the_cheap_commands_the_docs_show_run``. Each CLI start was ~0.3-0.5 CPU-s
    of imports, ~30 of them in this module."""
    cmd = [sys.executable, "-m", "datahub.cli.main", *args]
    return zygote.run(cmd, timeout=timeout, env=env, cwd=cwd)


def test_every_placeholder_in_angle_brackets_is_in_the_table() -> None:
    unknown = [
        f"{c.shown.where}: {word!r} in `{c.shown.text}`"
        for c in checked_commands()
        if c.program in PARSED
        for arg in c.args
        for word in re.findall(r"<[^<>]*>", arg)
    ]
    assert not unknown, "placeholders with no value in PLACEHOLDERS:\n" + "\n".join(unknown)


GLOBAL_VALUED = {"--home", "--config", "--catalog"}  # where: the test's own home stands for them


def _without_locations(args: tuple[str, ...]) -> list[str]:
    out, value_next = [], False
    for arg in args:
        if not value_next and arg.split("=", 1)[0] not in GLOBAL_VALUED:
            out.append(arg)
        value_next = not value_next and arg in GLOBAL_VALUED
    return out


def names_only(error: str, args: tuple[str, ...]) -> bool:
    """Whether ``error`` only says what an inline span leaves out when prose names a command
    or a flag (```datahub commit --changes```): an argument, or the value of its last flag."""
    if "the following arguments are required" in error:
        return True
    flag = re.escape(args[-1]) if args else "$^"
    return re.search(rf"argument (\S+/)?{flag}(/\S+)?: expected one argument$", error) is not None


def test_every_datahub_command_shown_parses() -> None:
    """A user copies these: one the parser refuses is a doc that lies (or a CLI that broke)."""
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


def test_every_kustomization_kubectl_is_shown_applying_exists() -> None:
    """``kubectl apply -k DIR`` / ``kubectl kustomize DIR``: DIR holds a kustomization.yaml."""
    dirs = {
        (c.shown.where, c.args[i + 1])
        for c in checked_commands()
        if c.program == "kubectl"
        for i, arg in enumerate(c.args[:-1])
        if arg in ("-k", "kustomize")
    }
    assert {d for _, d in dirs} >= {"csi/deploy", "csi/deploy/server"}, dirs
    missing = [
        f"{where}: {d}" for where, d in sorted(dirs) if not (REPO / d / "kustomization.yaml").is_file()
    ]
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


PYTHON_BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)
FIRST_PARTY = ("datahub", "labelx", "fuse_adapter", "csi")
# python blocks that show a fragment, not a program: their first line
FRAGMENTS = {"@pytest.mark.exclusive  # drops every file system's dentries and inodes"}


def test_every_python_example_parses_and_imports_what_the_code_has() -> None:
    """The docs' Python blocks: each is valid Python, and each name it imports from datahub's
    own packages exists there (third-party ones, torchvision or pandas, are the reader's)."""
    wrong, blocks = [], 0
    for doc in doc_files():
        if doc == HISTORY:
            continue
        text = (REPO / doc).read_text()
        for m in PYTHON_BLOCK.finditer(text):
            where = f"{doc}:{text.count(chr(10), 0, m.start()) + 1}"
            body = "\n".join(line[len(m.group(1)) :] for line in m.group(2).splitlines())
            if body.splitlines()[0] in FRAGMENTS:
                continue
            blocks += 1
            try:
                tree = ast.parse(body)
            except SyntaxError as exc:
                wrong.append(f"{where}: {exc}")
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FIRST_PARTY:
                    module = importlib.import_module(node.module)
                    wrong += [
                        f"{where}: {node.module} has no {a.name}"
                        for a in node.names
                        if not hasattr(module, a.name)
                        and importlib.util.find_spec(f"{node.module}.{a.name}") is None
                    ]
                elif isinstance(node, ast.Import):
                    wrong += [
                        f"{where}: no module {a.name}"
                        for a in node.names
                        if a.name.split(".")[0] in FIRST_PARTY and importlib.util.find_spec(a.name) is None
                    ]
    assert blocks > 10, blocks
    assert not wrong, "\n".join(wrong)


# commands that only read (or, `init`, make) a home: the docs' ones run for real on a new home
READ_ONLY = {
    ("init",),
    ("dataset", "list"),
    ("cache", "stats"),
    ("cache", "pins"),
    ("cache", "flush"),
    ("migrate",),
}


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
    env = cli_env(PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", HOME=str(tmp_path))
    for argv in [("init",), *sorted(runs)]:
        done = run_cli(argv, env=env, cwd=tmp_path, timeout=120)
        where = runs.get(argv, "first")
        assert done.returncode == 0, f"{where}: datahub {' '.join(argv)} -> {done.returncode}: {done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        if "--json" in argv:
            json.loads(done.stdout)


@pytest.mark.slow  # about 17 CLI runs (forks of the zygote): 80 s on a loaded machine as processes
def test_the_cache_commands_block_runs_as_written(tmp_path: Path) -> None:
    """docs/cache.md's command block, every line and each of its ``[...]`` forms, in order, on
    a home whose ``imagenet`` has a v3 (three imports of a local directory that changes).
    ``cache flush --workspace W`` is left out: a workspace exists only once a mount made it."""
    block = [c for s in shown_commands("docs/cache.md") if s.fenced for c in commands(s)]
    assert [c.args[:2] for c in block if c.program == "datahub"][:2] == [
        ("cache", "stats"),
        ("prefetch", "imagenet@v3"),
    ]
    env = cli_env(PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", HOME=str(tmp_path))

    def run(*args: str) -> str:
        done = run_cli(args, env=env, cwd=tmp_path, timeout=300)
        assert done.returncode == 0 and "Traceback" not in done.stderr, (
            f"datahub {' '.join(args)}: {done.stderr}"
        )
        return done.stdout

    for n in (1, 2, 3):
        for key in ("train/cat/1.jpg", f"train/dog/{n}.jpg", "val/cat/9.jpg"):
            (tmp_path / "src" / key).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "src" / key).write_bytes(f"{key} of import {n}".encode())
        run("import", "src", "--to", "imagenet", "-m", f"import {n}")
    ran = [c.args for c in block if c.program == "datahub" and "--workspace" not in c.args]
    for args in ran:
        run(*args)
    assert ("cache", "pin", "imagenet@v3", "--prefix", "train/") in ran and ran[-1] == ("cache", "flush")
    pins = run("cache", "pins").split()
    assert "imagenet@v3:train/" in pins and "imagenet@v3" not in pins  # pinned with a prefix, then unpinned


def _fuse_use_block() -> list[str]:
    """docs/fuse.md's "Use" block: its command lines, as written."""
    section = (REPO / "docs/fuse.md").read_text().split("## Use", 1)[1]
    body = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in body.splitlines() if line.startswith("datahub ")]


@pytest.mark.fuse
@pytest.mark.slow  # four datahub imports, three mount daemons: about a minute on a loaded machine
@pytest.mark.timeout(600)
def test_the_fuse_use_block_runs_as_written(tmp_path: Path, moto_endpoint) -> None:
    """docs/fuse.md's "Use" block, line by line. A mount line stays in the foreground, as the
    doc says it does without ``--background``, so each is started and left running; the last
    line unmounts the workspace. Put in place first, as README's tour test does: ``/mnt/``
    becomes this test's directory (its mount points made), ``s3://bucket/`` a fresh bucket
    and ``http://127.0.0.1:9000`` the local S3 server; ``imagenet`` gets three versions and
    ``coco`` a tag ``best``. Then the block's claims: ``MNT/<dataset>/v<N>`` and
    ``latest -> vN``, the bucket's snapshot named in ``.datahub``, the workspace's files
    committed to ``outputs`` by the unmount."""
    from datahub.catalog import open_catalog
    from datahub.storage import StoreRegistry
    from fuse_adapter.daemon import is_mounted
    from tests.fuse.conftest import make_env, wait_until

    env = make_env(tmp_path / "home", moto_endpoint)
    with StoreRegistry(env.config) as stores:
        for i in range(3):
            stores.store(f"s3://{env.bucket}").put(f"train/part-{i}.txt", f"row {i}\n".encode())
    bindir = Path(sys.executable).parent
    shell_env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DATAHUB_CONFIG": str(env.config_path),
    }

    def run(line: str) -> None:
        done = subprocess.run(
            ["bash", "-c", line], cwd=tmp_path, env=shell_env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{line}: {done.stdout}\n{done.stderr}"

    def put_in_place(*args: str) -> None:  # not the block's lines: the CLI on the zygote (run_cli)
        done = run_cli(args, env=cli_env(**shell_env), cwd=tmp_path, timeout=300)
        assert done.returncode == 0, f"datahub {' '.join(args)}: {done.stdout}\n{done.stderr}"

    for n in (1, 2, 3):
        (tmp_path / "src" / "train").mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / "train" / f"{n}.txt").write_text(f"import {n}\n")
        put_in_place("import", "src", "--to", "imagenet", "-m", f"import {n}")
    put_in_place("import", "src", "--to", "coco")
    put_in_place("tag", "coco", "best", "1")

    mnt = tmp_path / "mnt"
    lines = [
        line.replace("/mnt/", f"{mnt}/").replace("s3://bucket/", f"s3://{env.bucket}/")
        .replace("http://127.0.0.1:9000", moto_endpoint.url)
        for line in _fuse_use_block()
    ]  # fmt: skip
    assert [line.split()[1] for line in lines] == ["mount", "mount", "mount", "umount"], lines
    points = {name: mnt / name for name in ("data", "b", "out")}
    for point in points.values():
        point.mkdir(parents=True)
    daemons = []
    try:
        for line, point in zip(lines[:3], points.values(), strict=True):
            log = open(tmp_path / f"{point.name}.log", "w")  # noqa: SIM115 (closed with the daemon)
            proc = subprocess.Popen(
                ["bash", "-c", f"exec {line}"], cwd=tmp_path, env=shell_env, stdout=log, stderr=log
            )
            daemons.append((proc, log))
            wait_until(
                lambda p=point, d=proc: is_mounted(str(p)) or d.poll() is not None, 120
            )  # a hang guard
            assert is_mounted(str(point)), f"{line}: {(tmp_path / f'{point.name}.log').read_text()}"
        assert os.readlink(points["data"] / "imagenet" / "latest") == "v3"
        assert os.readlink(points["data"] / "coco" / "best") == "v1"
        assert (points["data"] / "imagenet" / "v3" / "train" / "3.txt").read_text() == "import 3\n"
        assert {f for _, _, files in os.walk(points["b"]) for f in files} >= {"part-0.txt", "part-2.txt"}
        assert f"s3.{env.bucket}.train@v1" in (points["b"] / ".datahub").read_text()
        (points["out"] / "metrics.txt").write_text("epoch 1: loss 0.42\n")
        run(lines[3])
        assert not is_mounted(str(points["out"]))
    finally:
        for point in points.values():
            if is_mounted(str(point)):
                subprocess.run(
                    [bindir / "datahub", "umount", str(point)],
                    env=shell_env,
                    capture_output=True,
                    timeout=300,
                )
            if is_mounted(str(point)):
                subprocess.run(["fusermount3", "-uz", str(point)], check=False)
        for proc, log in daemons:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
    assert all(proc.returncode == 0 for proc, _ in daemons), [proc.returncode for proc, _ in daemons]
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        assert [r.key for r in catalog.list_records("outputs", catalog.resolve("outputs").seq)] == [
            "metrics.txt"
        ]
    finally:
        catalog.close()


# ---------------------------------------------------------------- the checks' own checks


def test_the_extraction_finds_what_the_docs_show() -> None:
    """The checks above are only worth something if they see the commands and would fire."""
    found = {c.shown.text: c for c in checked_commands()}
    tour = found["datahub mount --background --workspace run-42 /mnt/out --commit-to outputs"]
    assert tour.shown.fenced and tour.shown.where.startswith("README.md:")
    assert "datahub log imagenet" in found and "datahub ls imagenet@latest --prefix train/cat/" in found
    pipe = [c for c in checked_commands() if c.shown.text.startswith("$D ls sample@v1")]
    assert pipe and pipe[0].args == (  # D=.venv/bin/datahub: the home from DATAHUB_HOME or ./var
        "ls",
        "sample@v1",
        "--filter",
        "labels.class=cat",
    )
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
    assert names_only("datahub export: error: argument -o/--output: expected one argument", ("export", "-o"))
    assert not names_only("datahub: error: unrecognized arguments: --nope", ("mount", "--nope"))
