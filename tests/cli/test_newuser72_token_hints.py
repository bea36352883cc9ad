"""What newuser72 met signing in to ``.venv/bin/datahub --home H serve --auth`` (docs/quickstart.md,
"Serving beyond this machine") from a checkout: the API's 401 said "(datahub token create)" and
"create a new one with 'datahub token create'", the browser's sign-in page and its refusals the
same: a bare ``datahub`` (not on PATH after ``make run``: "command not found" as typed), without
the ``--home`` the token must be made in and without the ``--principal`` the command needs. They
now name the command as the server was started, as its other lines and pages do
(``pages_name_commands_as_typed``), and it runs as shown."""

from __future__ import annotations

import html
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli.test_newuser25_cli import REPO, shell_runner
from tests.cli.test_newuser32_serve import served

EXE = REPO / ".venv" / "bin" / "datahub"
COMMAND = re.compile(r"`([^`]*token create[^`]*)`")
CODE = re.compile(r"<code>([^<]*token create[^<]*)</code>")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """``.venv/bin/datahub --home 'H' serve --auth`` run from a checkout-like directory: its URL,
    that directory and the command line as the user types datahub there."""
    root = tmp_path_factory.mktemp("auth")
    home = root / "a home"
    typed = f"{shlex.quote(str(EXE))} --home {shlex.quote(str(home))}"
    assert shell_runner(root)(f"{typed} init").returncode == 0
    with served(EXE, home, root, serve=("--auth",)) as url:
        yield url, root, typed


def _runs(root: Path, shown: str, typed: str) -> str:
    """``shown`` (a command a message names) run in the user's shell, NAME filled in: the
    token it prints."""
    assert shown.startswith(f"{typed} token create --principal NAME"), shown
    made = shell_runner(root)(shown.replace("NAME", "alice"))
    assert made.returncode == 0, f"{shown!r}: {made.stderr}"
    return made.stdout.splitlines()[0].strip()


def test_the_apis_401_names_the_token_command_as_the_server_runs(server: tuple[str, Path, str]) -> None:
    url, root, typed = server
    for sent in ({}, {"Authorization": "Bearer dh_nope"}):
        refused = httpx.get(url + "/v1/datasets", headers=sent, timeout=30)
        assert refused.status_code == 401, refused.text
        shown = COMMAND.search(refused.json()["error"]["message"])
        assert shown is not None, refused.text
        token = _runs(root, shown[1], typed)
    # a request with a body is answered before its body is read (early_auth): the same words
    posted = httpx.post(url + "/v1/datasets", json={"name": "pets"}, timeout=30)
    assert posted.status_code == 401 and COMMAND.search(posted.json()["error"]["message"])[1] == shown[1]
    listed = httpx.get(url + "/v1/datasets", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert listed.status_code == 200, listed.text


def test_the_sign_in_page_names_the_token_command_as_the_server_runs(server: tuple[str, Path, str]) -> None:
    url, root, typed = server
    page = httpx.get(url + "/login", timeout=30).text
    shown = [html.unescape(c) for c in CODE.findall(page)]
    assert shown and all(c.startswith(typed) for c in shown), page
    for reason in ("missing", "invalid"):
        refused = httpx.get(url + "/login", params={"error": reason}, timeout=30).text
        alert = re.search(r'role="alert">(.*?)</p>', refused, re.S)
        assert alert is not None and "`" not in alert[1], refused
        said = CODE.search(alert[1])
        assert said is not None, alert[1]
        _runs(root, html.unescape(said[1]), typed)
    # a script's bad token on a page: the error page says the same (as code, no backticks)
    scripted = httpx.get(
        url + "/", headers={"Authorization": "Bearer dh_nope", "Accept": "text/html"}, timeout=30
    )
    assert scripted.status_code == 401
    said = CODE.search(scripted.text)
    assert said is not None and html.unescape(said[1]).startswith(typed), scripted.text
