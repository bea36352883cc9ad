"""caller73: LabelX's sign-in page names ``make run``'s admin password file only to who can read it.

The page said "log in as admin with the password in /home/<user>/.datahub/labelx-admin-password"
to whoever loaded it: any address the server was reachable on, any user of the machine. That
tells an unauthenticated stranger the server's home (the account it runs as) and that ``admin``
still has the demo's first password, and helps nobody but the server's own user, the only one
who can read the 0600 file. It is now named only to a caller on loopback whose socket is the
server's user's (or root's) (``datahub.api.local_mode.foreign_user``).

A real LabelX served by uvicorn on every address, asked over loopback by this user, over the
host's other address, and over loopback by ``nobody`` (curl under ``setpriv``).
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
from collections.abc import Iterator

import httpx
import pytest

from labelx.app import create_labelx_app
from labelx.deps import demo_password_path
from tests.browser.conftest import make_env, serving


def _other_address() -> str | None:
    """An IPv4 address of this host that is not loopback (the one a route out uses)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.200", 9))  # no packet is sent: only the route is looked up
        found = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if ipaddress.ip_address(found).is_loopback else found


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str]]:
    """(the port LabelX listens on at every address, the demo password file's path)."""
    env = make_env(tmp_path_factory.mktemp("caller73-demo"), local_mode=False)
    env.config.home_path.mkdir(parents=True, exist_ok=True)
    secret = demo_password_path(env.config)
    secret.write_text("not-the-password\n")
    app = create_labelx_app(env.config, catalog=env.catalog, stores=env.stores)
    try:
        with serving(app, host="0.0.0.0") as url:
            yield httpx.URL(url).port, str(secret)
    finally:
        app.state.labelx.store.close()
        env.stores.close()
        env.catalog.close()


def test_this_user_on_loopback_is_told_where_the_password_is(served) -> None:
    port, secret = served
    page = httpx.get(f"http://127.0.0.1:{port}/login", timeout=60)
    assert page.status_code == 200 and 'id="demo-password"' in page.text and secret in page.text


def test_a_caller_from_another_address_is_not(served) -> None:
    port, secret = served
    address = _other_address()
    if address is None:
        pytest.skip("this host has no address but loopback")
    page = httpx.get(f"http://{address}:{port}/login", timeout=60)
    assert page.status_code == 200 and "Log in" in page.text
    assert "demo-password" not in page.text and secret not in page.text, "the path was shown"


def test_another_user_of_this_machine_is_not(served) -> None:
    port, secret = served
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    done = subprocess.run(
        [*as_nobody, "curl", "-sS", f"http://127.0.0.1:{port}/login"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "Log in" in done.stdout, done.stderr
    assert "demo-password" not in done.stdout and secret not in done.stdout, "the path was shown"
