"""What newuser32 met browsing ``.venv/bin/datahub --home H serve`` from a checkout.

The server's own lines name commands as the user runs datahub (``.venv/bin/datahub --home
H …``: no ``datahub`` is on PATH after ``make run``), but the pages it served named a bare
``datahub``: the empty list's ``datahub import SRC --to NAME`` and the version page's "Mount
it" snippet were "command not found" as shown. The pages now write them as the command line
that started the server, as ``make run``'s pages do.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx

from datahub.cli.serve_cmd import build_app
from tests.browser.conftest import pets_env
from tests.servers import free_port, wait_for_http

REPO = Path(__file__).resolve().parents[2]
SHELL_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # no datahub on it


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATAHUB_", "VIRTUAL_ENV"))}
    return env | {"PYTHONPATH": str(REPO), "PATH": SHELL_PATH}


@contextlib.contextmanager
def served(exe: Path, home: Path, cwd: Path, *options: str, serve: tuple[str, ...] = ()) -> Iterator[str]:
    """``EXE --home HOME [OPTIONS] serve --no-labelx [SERVE]`` (``--labelx`` in ``SERVE`` in its
    place) run from ``cwd`` as a user types it, until its first page answers: its URL, for the
    block; stopped after it."""
    port = free_port()
    labelx = "--labelx" if "--labelx" in serve else "--no-labelx"
    serve = tuple(o for o in serve if o != "--labelx")
    argv = [str(exe), "--home", str(home), *options, "serve", labelx, *serve, "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=cwd, env=_env(), stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(proc, url + "/")
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_the_pages_of_serve_name_commands_as_the_server_was_started(tmp_path: Path) -> None:
    exe = REPO / ".venv" / "bin" / "datahub"
    home = tmp_path / "my home"
    typed = f"{shlex.quote(str(exe))} --home {shlex.quote(str(home))}"
    with served(exe, home, tmp_path) as url:
        page = httpx.get(url + "/", timeout=30)
        empty = re.search(r'id="no-datasets">.*?<code>(.*?)</code>', page.text, re.S)
        assert empty is not None, page.text
        shown = html.unescape(empty[1])
        assert shown == f"{typed} import SRC --to NAME", shown
        # run as shown, with a real source: the command works in the reader's shell
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "a.jpg").write_bytes(b"a" * 10)
        script = shown.replace("SRC", str(tmp_path / "src")).replace("NAME", "pets")
        made = subprocess.run(
            ["bash", "-c", script], cwd=tmp_path, env=_env(), capture_output=True, text=True
        )
        assert made.returncode == 0 and "committed pets@v1" in made.stdout, made.stderr
        version = httpx.get(url + "/datasets/pets/versions/1", timeout=30).text
        assert f"&& {typed} mount --background /mnt/pets pets@v1 &&" in html.unescape(version), version


def test_labelx_in_serve_names_commands_as_the_server_was_started(tmp_path: Path) -> None:
    """LabelX's dashboard (its pre-annotation command) follows the same rule."""
    from datahub.cli.serve_cmd import pages_name_commands_as_typed

    with pets_env(tmp_path) as env:
        app, cache = build_app(env.config, env.catalog, env.stores, labelx=True)
        try:
            pages_name_commands_as_typed(app, ".venv/bin/datahub --home var")
            assert app.state.browser.cli == ".venv/bin/datahub --home var"
            labelx = next(r.app for r in app.routes if getattr(r, "path", "") == "/labelx")
            assert labelx.state.labelx.cli == ".venv/bin/datahub --home var"
        finally:
            cache.close()
