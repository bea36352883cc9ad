"""newuser21: what a new user met in the demo and the command line.

``make run`` makes LabelX's first admin with a random password in ``<home>/labelx-admin-password``,
which the login page and the demo's summary name. Once ``datahub labelx set-password admin``
replaced that password, the file stayed and both sent people to a password that no longer
opened the account; and a file removed by hand came back at the next ``make run`` with a new
password, for the account it did not make.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datahub.cli.main import main
from datahub.config import load_config
from datahub.demo import labelx_admin
from labelx.auth import verify_password
from labelx.deps import demo_password_path, labelx_db_path
from labelx.store import LabelStore


def _admin_hash(config) -> str:
    store = LabelStore(labelx_db_path(config))
    try:
        return store.user_with_hash("admin")[1]
    finally:
        store.close()


def test_the_demo_s_admin_password_file_is_named_only_while_it_opens_the_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = load_config(env={}, overrides={"home": str(tmp_path / "var")})
    assert main(["--home", str(config.home_path), "init"]) == 0  # make run's home: a catalog in it
    secret = labelx_admin(config)
    assert secret == demo_password_path(config) and verify_password(
        secret.read_text().strip(), _admin_hash(config)
    )
    assert labelx_admin(config) == secret  # a second run: the same file, the same account

    monkeypatch.setenv("LABELX_PASSWORD", "a password of my own")
    assert main(["--home", str(config.home_path), "labelx", "set-password", "admin"]) == 0
    assert f"removed {secret}, which held the old password" in capsys.readouterr().out
    assert not secret.exists()  # the login page names the file while it exists
    assert labelx_admin(config) is None and not secret.exists()  # not made again for this account
    assert verify_password("a password of my own", _admin_hash(config))

    # a file left from before (set-password of an older datahub): removed by the next run
    secret.write_text("the first password\n")
    assert labelx_admin(config) is None and not secret.exists()
