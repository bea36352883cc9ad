"""What only the rados:// store does: its client library, its pool, an unreachable cluster.

The ObjectStore contract itself runs on RADOS in test_contract.py (backend ``rados``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from datahub.errors import AccessDenied, StorageError, TransientStorageError
from datahub.storage import open_store, split_object_url
from tests.servers import free_port
from tests.storage.conftest import make_config


def test_without_python3_rados_the_error_says_what_to_install(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "rados", None)  # import rados -> ImportError
    store = open_store("rados://pool/prefix", make_config(tmp_path))  # opening does no I/O
    with pytest.raises(StorageError, match="python3-rados"):
        store.stat("k")


def test_rados_urls_name_a_pool_and_a_key() -> None:
    assert split_object_url("rados://cache/pool/pages/ab/x") == ("rados://cache", "pool/pages/ab/x")


@pytest.mark.ceph
def test_a_missing_pool_is_named(ceph_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(ceph_cluster.vars["CEPH_PYLIB"])
    monkeypatch.setenv("CEPH_CONF", ceph_cluster.vars["CEPH_CONF"])
    pool = f"nopool-{uuid.uuid4().hex[:8]}"
    store = open_store(f"rados://{pool}/x", make_config(tmp_path))
    try:
        with pytest.raises(StorageError, match=f"no pool '{pool}'"):
            store.put("k", b"x")
    finally:
        store.close()


@pytest.mark.ceph
def test_an_unreachable_cluster_is_a_transient_error_not_a_hang(ceph_cluster, tmp_path, monkeypatch) -> None:
    """No monitor answers: librados would wait for ever; the store gives up after its timeout."""
    monkeypatch.syspath_prepend(ceph_cluster.vars["CEPH_PYLIB"])
    conf = tmp_path / "ceph.conf"
    conf.write_text(
        f"[global]\nmon host = 127.0.0.1:{free_port()}\nkeyring = {ceph_cluster.vars['CEPH_KEYRING']}\n"
        "client mount timeout = 2\n"
    )
    monkeypatch.setenv("CEPH_CONF", str(conf))
    store = open_store("rados://testpool/x", make_config(tmp_path))
    started = time.monotonic()
    try:
        with pytest.raises(TransientStorageError, match="did not answer"):
            store.read("k")
    finally:
        store.close()
    assert time.monotonic() - started < 60  # a hang guard, far above the 2 s timeout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ("", {}),
        ("--id datahub", {"rados_id": "datahub"}),
        ("--conf x --id=datahub", {"rados_id": "datahub"}),
        ("-n client.dh --keyring k", {"name": "client.dh"}),
    ],
)
def test_the_client_name_is_read_from_ceph_args(args: str, expected: dict) -> None:
    from datahub.storage.rados import _client_name

    assert _client_name(args) == expected


@pytest.mark.ceph
def test_a_key_without_caps_on_the_pool_is_access_denied(ceph_cluster, tmp_path, monkeypatch) -> None:
    """The node's own scoped key (named in $CEPH_ARGS) is used, and Ceph's refusal is named."""
    monkeypatch.syspath_prepend(ceph_cluster.vars["CEPH_PYLIB"])
    admin = {k: v for k, v in os.environ.items() if not k.startswith("CEPH_")}
    admin.update(CEPH_CONF=ceph_cluster.vars["CEPH_CONF"], CEPH_KEYRING=ceph_cluster.vars["CEPH_KEYRING"])
    client, keyring = f"t-{uuid.uuid4().hex[:8]}", tmp_path / "keyring"
    subprocess.run(
        ["ceph", "auth", "get-or-create", f"client.{client}", "mon", "allow r", "osd", "allow rwx pool=elsewhere",
         "-o", str(keyring)],
        env=admin, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    mon_host = re.search(r"^mon host = (.+)$", Path(ceph_cluster.vars["CEPH_CONF"]).read_text(), re.M).group(
        1
    )
    conf = tmp_path / "ceph.conf"
    conf.write_text(f"[global]\nmon host = {mon_host}\nkeyring = {keyring}\n")
    monkeypatch.setenv("CEPH_CONF", str(conf))
    monkeypatch.setenv("CEPH_ARGS", f"--id {client}")
    store = open_store(f"rados://{ceph_cluster.vars['CEPH_POOL']}/x", make_config(tmp_path))
    try:
        with pytest.raises(AccessDenied, match="osd caps on pool"):
            store.put("k", b"x")
    finally:
        store.close()
