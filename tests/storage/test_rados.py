"""What only the rados:// store does: its client library, its pool, an unreachable cluster.

The ObjectStore contract itself runs on RADOS in test_contract.py (backend ``rados``).
"""

from __future__ import annotations

import sys
import time
import uuid

import pytest

from datahub.errors import StorageError, TransientStorageError
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
