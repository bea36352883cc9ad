"""Issue 35: the operator's path to a private dataset, end to end, as docs/csi.md tells it.

A grant written with the CLI (``datahub dataset update D --grant
system:serviceaccount:NS:SA=reader``) or the API (``PATCH /v1/datasets/D`` with a token),
then a NodePublishVolume as that pod: the plugin mounts the dataset and the bytes are right.
Before the grant and after a revoke, NOT_FOUND names the dataset and the principal, the
answer of a dataset that does not exist (caller72: PERMISSION_DENIED told a pod's author that
the dataset exists; tests/csi/test_caller72_hidden_dataset.py). The access list is never
written straight into the catalog here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from datahub.api import create_app
from datahub.api.tokens import issue_token
from datahub.catalog import open_catalog
from datahub.catalog.model import Put, Record
from tests.csi.conftest import CsiEnv, Plugin, wait_until
from tests.csi.test_publish import pod_info

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.fuse

TRAINER = "system:serviceaccount:team-a:trainer"
EVAL = "system:serviceaccount:team-b:eval.v2"  # a service account name is a DNS subdomain
SECRET = {"labels/secret.txt": b"team a only\n", "img/0.bin": os.urandom(70_000)}


def datahub(env: CsiEnv, *args: str) -> subprocess.CompletedProcess:
    """The installed ``datahub`` command, pointed at the plugin's catalog the way an operator
    would: ``DATAHUB_CONFIG``, no other flag."""
    command = [str(Path(sys.executable).with_name("datahub")), *args]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    environ["DATAHUB_CONFIG"] = str(env.config_path)
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=environ)


@pytest.fixture(scope="module")
def private(csi_env: CsiEnv) -> str:
    """A dataset with data and an owner, so it is private: nobody else may mount it yet."""
    csi_env.commit("private", SECRET)
    done = datahub(csi_env, "dataset", "update", "private", "--owner", "alice@example.com")
    assert done.returncode == 0, done.stderr
    return "private"


def assert_denied(plugin: Plugin, env: CsiEnv, dataset: str, principal: str, name: str) -> None:
    namespace, account = principal.split(":")[2:]
    target = env.target(name)
    with pytest.raises(grpc.RpcError) as err:
        plugin.publish(target, {"dataset": dataset, **pod_info(namespace, account)}, volume_id=name)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value.details()  # as if missing (caller72)
    details = err.value.details()
    assert repr(dataset) in details and principal in details and "not found, or not readable by" in details
    assert f"--grant {principal}=reader" in details, details
    assert not os.path.exists(target)


def assert_mounts(plugin: Plugin, env: CsiEnv, dataset: str, principal: str, name: str) -> None:
    namespace, account = principal.split(":")[2:]
    target = env.target(name)
    plugin.publish(target, {"dataset": dataset, **pod_info(namespace, account)}, volume_id=name)
    try:
        for key, data in SECRET.items():
            assert Path(target, key).read_bytes() == data
    finally:
        plugin.unpublish(target, name)


def test_a_grant_written_with_the_cli_lets_that_pod_mount_and_a_revoke_stops_it(
    plugin: Plugin, csi_env: CsiEnv, private: str
) -> None:
    assert_denied(plugin, csi_env, private, TRAINER, "cli-before")
    # exactly the command of docs/csi.md, "Who may publish what"
    done = datahub(csi_env, "dataset", "update", private, "--grant", f"{TRAINER}=reader")
    assert done.returncode == 0, done.stderr
    assert_mounts(plugin, csi_env, private, TRAINER, "cli-granted")
    assert_denied(plugin, csi_env, private, "system:serviceaccount:team-b:trainer", "cli-other-ns")
    done = datahub(csi_env, "dataset", "update", private, "--revoke", TRAINER)
    assert done.returncode == 0, done.stderr
    assert_denied(plugin, csi_env, private, TRAINER, "cli-revoked")


@pytest.fixture(scope="module")
def admin_api(csi_env: CsiEnv) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The real API app on the plugin's catalog, authentication on, with an admin's token."""
    config = csi_env.config.model_copy(deep=True)
    config.api.local_mode = False
    catalog = open_catalog(config.resolved_catalog_url)
    token, _ = issue_token(catalog.store, "ops", admin=True)
    try:
        with TestClient(create_app(config, catalog=catalog)) as client:
            yield client, {"Authorization": f"Bearer {token}"}
    finally:
        catalog.close()


def test_the_same_grant_through_the_api(plugin: Plugin, csi_env: CsiEnv, private: str, admin_api) -> None:
    client, auth = admin_api
    assert_denied(plugin, csi_env, private, EVAL, "api-before")
    response = client.patch(f"/v1/datasets/{private}", headers=auth, json={"acl": {EVAL: "reader"}})
    assert response.status_code == 200, response.text
    assert response.json()["acl"] == {EVAL: "reader"}
    assert_mounts(plugin, csi_env, private, EVAL, "api-granted")
    response = client.patch(f"/v1/datasets/{private}", headers=auth, json={"acl": {}})
    assert response.status_code == 200, response.text
    assert_denied(plugin, csi_env, private, EVAL, "api-revoked")


def test_a_pod_the_rule_cannot_name_is_refused_before_any_access_check(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    """A service account no grant could hold (markup in it) is an invalid request, whatever
    the access list says: even an open dataset is not mounted for it."""
    target = csi_env.target("bad-principal")
    with pytest.raises(grpc.RpcError) as err:
        plugin.publish(target, {"dataset": "imgs", **pod_info("team-a", "<b>x</b>")}, volume_id="bad")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "invalid principal" in err.value.details()
    assert not os.path.exists(target)


def test_a_bucket_volume_cannot_read_a_private_dataset_with_the_plugins_credentials(
    plugin: Plugin, csi_env: CsiEnv, private: str
) -> None:
    """The plugin's S3 credentials read every dataset's objects; it checks each dataset's access
    list before it mounts one. A bucket has no access list: a pod denied the dataset mounted
    the objects' bucket instead, as a bucket volume without secrets, and read the dataset's
    bytes with the plugin's credentials. A bucket volume now brings credentials of its own."""
    assert_denied(plugin, csi_env, private, EVAL, "eval-denied")
    namespace, account = EVAL.split(":")[2:]
    target = csi_env.target("eval-bucket")
    context = {
        "bucket": csi_env.bucket,
        "csi.storage.k8s.io/ephemeral": "true",
        **pod_info(namespace, account),
    }
    try:
        with pytest.raises(grpc.RpcError) as err:
            plugin.publish(target, context, volume_id="eval-bucket")
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, err.value.details()
        assert "s3AccessKeyId" in err.value.details() and "nodePublishSecretRef" in err.value.details()
        assert not os.path.exists(target)
    finally:
        if any(p["target_path"] == target for p in plugin.state()):  # before the fix: it mounted
            plugin.unpublish(target, "eval-bucket")
    own = {"s3AccessKeyId": csi_env.endpoint.access_key, "s3SecretAccessKey": csi_env.endpoint.secret_key}
    plugin.publish(target, context, volume_id="eval-bucket", secrets=own)  # credentials of its own: served
    try:
        assert os.listdir(target)
    finally:
        plugin.unpublish(target, "eval-bucket")


def test_a_bucket_snapshot_is_no_dataset_every_pod_may_mount(plugin: Plugin, csi_env: CsiEnv) -> None:
    """A bucket volume records its listing as a dataset (``s3.<bucket>.<prefix>``), made by the
    mount with no owner and no access list: "open to every pod". A pod with no credentials for
    the bucket then mounted that dataset, read with the plugin's credentials, and got what only
    the bucket's credentials should give. Such a dataset needs an explicit grant."""
    csi_env.endpoint.client().put_object(
        Bucket=csi_env.bucket, Key="snap/team-a.txt", Body=b"team a's bucket\n"
    )
    own = {"s3AccessKeyId": csi_env.endpoint.access_key, "s3SecretAccessKey": csi_env.endpoint.secret_key}
    first = csi_env.target("team-a-bucket")
    inline = {"csi.storage.k8s.io/ephemeral": "true"}
    bucket = {"bucket": csi_env.bucket, "prefix": "snap", **inline, **pod_info("team-a", "trainer")}
    plugin.publish(first, bucket, volume_id="a-bucket", secrets=own)
    try:
        assert Path(first, "team-a.txt").read_bytes() == b"team a's bucket\n"
    finally:
        plugin.unpublish(first, "a-bucket")
    snapshot = f"s3.{csi_env.bucket}.snap"
    target = csi_env.target("team-b-snapshot")
    try:
        with pytest.raises(grpc.RpcError) as err:
            plugin.publish(
                target, {"dataset": snapshot, **inline, **pod_info("team-b", "eval")}, volume_id="b-snap"
            )
        # as if missing (caller72): it said "a snapshot of bucket s3://…" of one that exists
        assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value.details()
        assert repr(snapshot) in err.value.details() and "not readable by" in err.value.details()
        assert not os.path.exists(target)
    finally:
        if any(p["target_path"] == target for p in plugin.state()):  # before the fix: it mounted
            plugin.unpublish(target, "b-snap")
    done = datahub(
        csi_env, "dataset", "update", snapshot, "--grant", "system:serviceaccount:team-b:eval=reader"
    )
    assert done.returncode == 0, done.stderr
    plugin.publish(target, {"dataset": snapshot, **inline, **pod_info("team-b", "eval")}, volume_id="b-snap")
    try:  # granted on purpose: served
        assert Path(target, "team-a.txt").read_bytes() == b"team a's bucket\n"
    finally:
        plugin.unpublish(target, "b-snap")


def test_a_bucket_volume_shows_its_own_listing_never_a_planted_snapshot(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    """A bucket volume reused the newest version of dataset ``s3.<bucket>.<prefix>``, and any
    API token may create a dataset of that name and commit records into it (naming objects of
    another bucket). The pod then read those bytes as its bucket's files, and a pod whose own
    credentials the bucket refuses saw the names another pod's listing recorded. Every first
    publication now lists the bucket with the volume's own credentials, and commits that
    listing into no dataset someone owns: mallory's gets no new version (snapshot13's finding)."""
    client = csi_env.endpoint.client()
    client.put_object(Bucket=csi_env.bucket, Key="planted/real.txt", Body=b"the bucket's own bytes\n")
    fake = client.put_object(Bucket=csi_env.bucket, Key="elsewhere/fake.txt", Body=b"PLANTED BYTES\n")
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:  # what POST /v1/datasets and a commit let any token do
        name = f"s3.{csi_env.bucket}.planted"
        catalog.create_dataset(name, source=f"s3://{csi_env.bucket}/planted", owner="mallory")
        url = f"s3://{csi_env.bucket}/elsewhere/fake.txt"
        catalog.commit(name, [Put(Record("real.txt", url, fake["ETag"].strip('"'), 14))], message="planted")
    finally:
        catalog.close()
    own = {"s3AccessKeyId": csi_env.endpoint.access_key, "s3SecretAccessKey": csi_env.endpoint.secret_key}
    target = csi_env.target("planted")
    context = {"bucket": csi_env.bucket, "prefix": "planted", **pod_info("team-a", "trainer")}
    plugin.publish(target, context, volume_id="planted", secrets=own)
    try:
        assert Path(target, "real.txt").read_bytes() == b"the bucket's own bytes\n"
        wait_until(
            lambda: json.loads(Path(target, ".datahub").read_text())["state"] == "ready", 30, "the listing"
        )
        info = json.loads(Path(target, ".datahub").read_text())
        assert info["versions"] == [] and info["snapshot"].startswith(f"not committed: dataset {name!r}")
    finally:
        plugin.unpublish(target, "planted")
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        assert catalog.store.head(name) == 1
    finally:
        catalog.close()
