"""What only the rados:// store does: its client library, its pool, an unreachable cluster.

The ObjectStore contract itself runs on RADOS in test_contract.py (backend ``rados``).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from datahub.errors import AccessDenied, ObjectChanged, StorageError, TransientStorageError
from datahub.storage import open_store, split_object_url
from datahub.storage.rados import ETAG_XATTR
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


@pytest.fixture
def rados_store(ceph_cluster, tmp_path, monkeypatch):
    """A rados:// store on the session Ceph's pool under a fresh prefix, and a plain librados
    I/O context on the same pool (another client writing the same objects)."""
    monkeypatch.syspath_prepend(ceph_cluster.vars["CEPH_PYLIB"])
    monkeypatch.setenv("CEPH_CONF", ceph_cluster.vars["CEPH_CONF"])
    import rados

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    store = open_store(f"rados://{ceph_cluster.vars['CEPH_POOL']}/{prefix}", make_config(tmp_path))
    cluster = rados.Rados(conffile=ceph_cluster.vars["CEPH_CONF"])
    cluster.connect()
    ioctx = cluster.open_ioctx(ceph_cluster.vars["CEPH_POOL"])
    try:
        yield store, ioctx, prefix
    finally:
        for obj in list(ioctx.list_objects()):
            if obj.key.startswith(prefix + "/"):
                ioctx.remove_object(obj.key)
        ioctx.close()
        cluster.shutdown()
        store.close()


@pytest.mark.ceph
def test_a_rewrite_by_another_client_changes_the_etag(rados_store) -> None:
    """Same size, other bytes, written with plain librados: the etag a put returned no longer
    matches, so a conditional read under it is ObjectChanged, never the other client's bytes."""
    store, ioctx, prefix = rados_store
    info = store.put("k", b"A" * 4096)
    assert store.stat("k").etag == info.etag
    ioctx.write_full(f"{prefix}/k", b"B" * 4096)
    assert store.stat("k").etag != info.etag
    with pytest.raises(ObjectChanged):
        store.read("k", 0, 10, etag=info.etag)
    again = store.put("k", b"A" * 4096)  # the same bytes put again: a new version, a new etag
    assert again.etag != info.etag and store.stat("k").etag == again.etag
    assert store.read("k", etag=again.etag) == b"A" * 4096


@pytest.mark.ceph
def test_objects_put_with_an_md5_record_keep_it_until_put_again(rados_store) -> None:
    """Objects an older datahub put hold ``<md5> <size>`` in ``datahub.etag``: their etag stays
    that md5 (records of them keep reading), and a put over one clears it in the same op."""
    store, ioctx, prefix = rados_store
    payload = b"written by an older put"
    md5 = hashlib.md5(payload).hexdigest()
    ioctx.write_full(f"{prefix}/old", payload)
    ioctx.set_xattr(f"{prefix}/old", ETAG_XATTR, f"{md5} {len(payload)}".encode())
    assert store.stat("old").etag == md5
    assert store.read("old", etag=md5) == payload
    new = store.put("old", payload)
    assert new.etag != md5 and store.stat("old").etag == new.etag
    with pytest.raises(ObjectChanged):
        store.read("old", etag=md5)


@pytest.mark.ceph
def test_the_io_context_of_a_thread_that_ended_is_closed(rados_store) -> None:
    """A mount's request threads come and go (trio ends an idle worker after 10 s): each used
    to leave its I/O context open until the store closed, a leak growing with uptime."""
    store, _ioctx, _prefix = rados_store
    for i in range(20):
        thread = threading.Thread(target=store.put, args=(f"k{i}", b"x"))
        thread.start()
        thread.join()
    assert store._ioctxs == []
    assert [info.key for info in store.list()] == [f"k{i}" for i in sorted(range(20), key=str)]
