"""A ``datahub`` process imports only what its command needs.

Every CLI command, mount daemon and CSI plugin is a fresh interpreter: a library imported at
the top of a module every process loads (boto3, fastapi, PIL, lmdb, the cache, the pack
engine …) is paid by ``datahub --help`` and ``datahub ls`` alike, about 1 CPU-s before this
was cut (docs/benchmarks.md, "Process start"). These tests run real commands in a fresh
interpreter and check by what is in ``sys.modules``, not by timing, that the libraries a
command does not use stay unimported, and that every command is still registered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from datahub.cli.main import main

ROOT = Path(__file__).resolve().parents[1]

# libraries no read-only catalog command, nor `--help`, needs
HEAVY = (
    "pydantic_settings", "boto3", "botocore", "s3fs", "fsspec", "fastapi", "starlette", "uvicorn",
    "torch", "numpy", "PIL", "lmdb", "pymongo", "grpc", "httpx", "jinja2", "trio", "pyfuse3",
    "multiprocessing", "asyncio", "datahub.cache", "datahub.writeback", "datahub.pack",
    "datahub.storage.s3", "datahub.api.app", "labelx.app", "fuse_adapter.mount_assembly",
    "datahub.api.schemas",  # the API's pydantic models: the CLI prints datahub.catalog.public's rows
)  # fmt: skip

# runs ARGV as the `datahub` command would, then writes what was imported to OUT
PROBE = """
import json, sys
out, module, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.argv = [module, *argv]
import importlib
try:
    code = importlib.import_module(module).main()
except SystemExit as exc:
    code = exc.code
with open(out, "w") as fh:
    json.dump({"code": code, "modules": sorted(sys.modules)}, fh)
"""


def imported(tmp_path: Path, module: str, *argv: str) -> set[str]:
    """The modules a fresh interpreter holds after ``module``'s main ran with ``argv``."""
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), module, *argv],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert out.exists(), done.stderr
    result = json.loads(out.read_text())
    assert result["code"] in (0, None), done.stderr
    return set(result["modules"])


def heavy_in(modules: set[str], allowed: tuple[str, ...] = ()) -> list[str]:
    return sorted(h for h in HEAVY if h in modules and h not in allowed)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A catalog with one dataset of three local files (made in this process)."""
    root = tmp_path_factory.mktemp("startup")
    src = root / "src"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}.txt").write_text(f"file {i}\n")
    assert main(["--home", str(root / "home"), "init"]) == 0
    assert main(["--home", str(root / "home"), "import", str(src), "--to", "ds", "-m", "three"]) == 0
    return root / "home"


def test_help_imports_no_command_library_and_no_config(tmp_path: Path) -> None:
    modules = imported(tmp_path, "datahub.cli.main", "--help")
    assert heavy_in(modules) == []
    assert "pydantic" not in modules  # the config is built only when a command runs
    # every command is still registered: their modules are imported, only their libraries are not
    for name in (
        "datahub.cli.pack_cmd",
        "datahub.cli.serve_cmd",
        "fuse_adapter.mount_cmd",
        "labelx.labelx_cmd",
    ):
        assert name in modules


@pytest.mark.parametrize(
    "argv",
    [("ls", "ds"), ("dataset", "list"), ("--json", "ls", "ds"), ("log", "ds"), ("diff", "ds", "1", "1"),
     ("commit", "ds", "--changes", "CHANGES", "-m", "one more")],
    ids=" ".join,
)  # fmt: skip
def test_catalog_commands_import_no_storage_server_or_cache_library(
    tmp_path: Path, home: Path, argv: tuple[str, ...]
) -> None:
    # suite36: ls, log, diff and commit built the API's pydantic models (datahub.api.schemas) to
    # print their rows, 12 % of a small `datahub ls`'s CPU; a change set of plain puts
    # (datahub.catalog.put_lines: compact, s3:// URLs) needs none
    changes = tmp_path / "changes.jsonl"
    changes.write_text('{"op":"put","record":{"key":"new.txt","url":"s3://b/new.txt","etag":"e","size":1}}\n')
    argv = tuple(str(changes) if a == "CHANGES" else a for a in argv)
    modules = imported(tmp_path, "datahub.cli.main", "--home", str(home), *argv)
    assert heavy_in(modules) == []
    assert "datahub.catalog" in modules  # it did run against the catalog


def test_the_mount_entry_point_parses_without_the_fuse_and_cache_stack(tmp_path: Path) -> None:
    modules = imported(tmp_path, "fuse_adapter.__main__", "mount", "--help")
    assert heavy_in(modules) == []


def test_unmounting_what_is_not_mounted_needs_no_fuse_cache_or_catalog_stack(tmp_path: Path) -> None:
    # every FUSE test's teardown runs it; before, it imported the whole mount assembly
    (tmp_path / "mnt").mkdir()
    modules = imported(
        tmp_path, "fuse_adapter.__main__", "--home", str(tmp_path / "h"), "umount", str(tmp_path / "mnt")
    )
    assert heavy_in(modules) == []


def test_the_api_server_imports_no_http_client() -> None:
    # httpx (with its own command line: click, rich, pygments) is the remote catalog's client;
    # the server's routes only share its wire headers
    probe = "import sys, datahub.api.app, datahub.browser, labelx.app; print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    modules = set(json.loads(done.stdout.replace("'", '"')))
    assert "datahub.api.routes.remote" in modules and "httpx" not in modules


def test_the_csi_plugin_starts_without_the_write_back_engine_and_the_cache() -> None:
    # they are needed only when a workspace volume is finished (csi.finish), in that call
    probe = "import sys, csi.controller, csi.node, csi.server; print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    modules = set(json.loads(done.stdout.replace("'", '"')))
    assert "csi.finish" in modules
    assert heavy_in(modules, allowed=("grpc", "asyncio")) == []  # grpc imports asyncio itself


def test_every_command_is_registered() -> None:
    from datahub.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    expected = {"init", "serve", "dataset", "import", "commit", "log", "ls", "diff", "tag", "export",
                "derive", "token", "cache", "prefetch", "mount", "umount", "pack", "pack-worker", "labelx"}  # fmt: skip
    assert expected <= set(sub.choices)


# runs `datahub ARGV` (a server), stops it with SIGTERM once URL answers, then writes what was imported
SERVE_PROBE = """
import json, os, signal, sys, threading, time, urllib.request
out, url, argv = sys.argv[1], sys.argv[2], sys.argv[3:]

def stop_once_answering():
    while True:
        try:
            urllib.request.urlopen(url, timeout=5)
            break
        except OSError:
            time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=stop_once_answering, daemon=True).start()
from datahub.cli.main import main
code = main(argv)
with open(out, "w") as fh:
    json.dump({"code": code, "modules": sorted(sys.modules)}, fh)
"""


def test_a_server_started_on_a_local_home_imports_no_websocket_or_storage_sdk(
    tmp_path: Path, home: Path
) -> None:
    # no route is a WebSocket: uvicorn's "auto" imported wsproto in every server start (the API
    # with LabelX here; `labelx serve` and the demo run the same ApiServer)
    from tests.servers import free_port

    port = free_port()
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    command = ["--home", str(home), "serve", "--port", str(port)]
    url = f"http://127.0.0.1:{port}/labelx/login"
    done = subprocess.run(
        [sys.executable, "-c", SERVE_PROBE, str(out), url, *command],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert out.exists(), done.stderr
    result = json.loads(out.read_text())
    assert result["code"] == 0, done.stderr
    modules = set(result["modules"])
    assert "fastapi" in modules and "labelx.app" in modules  # it did serve both
    unwanted = ("wsproto", "websockets", "torch", "boto3", "s3fs", "httpx", "pymongo", "grpc", "pyfuse3")
    assert sorted(m for m in unwanted if m in modules) == []


# documented scripts whose `--help` tests/test_docs_commands.py runs (each a fresh interpreter)
SCRIPTS = (
    "examples/train_packed.py",
    "bench/mount/cold.py",
    "bench/mount/kernel_profile.py",
    "bench/mount/ssd_hit.py",
    "bench/mount/warm_path.py",
)

# runs SCRIPT's `--help` as `python SCRIPT --help` would, then writes what was imported
SCRIPT_PROBE = """
import json, runpy, sys
out, script = sys.argv[1], sys.argv[2]
sys.argv = [script, "--help"]
try:
    runpy.run_path(script, run_name="__main__")
    code = 0
except SystemExit as exc:
    code = exc.code
with open(out, "w") as fh:
    json.dump({"code": code, "modules": sorted(sys.modules)}, fh)
"""


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_documented_script_says_its_flags_without_importing_what_it_runs(
    tmp_path: Path, script: str
) -> None:
    # examples/train_packed.py --help imported torch (4 CPU-s); the mount benches the test
    # fixtures (pytest, boto3, the FUSE stack: about 1 CPU-s each)
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT_PROBE, str(out), str(ROOT / script)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.exists(), done.stderr
    result = json.loads(out.read_text())
    assert result["code"] in (0, None), done.stderr
    modules = set(result["modules"])
    assert "usage:" in done.stdout, done.stdout
    unwanted = ("torch", "numpy", "PIL", "boto3", "botocore", "pytest", "tests.fuse.conftest", "tests.servers",
                "trio", "pyfuse3", "datahub.pack", "datahub.cache", "datahub.catalog")  # fmt: skip
    assert sorted(m for m in unwanted if m in modules) == []
