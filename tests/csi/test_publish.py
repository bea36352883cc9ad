"""NodePublishVolume / NodeUnpublishVolume with real FUSE mounts: data read back, idempotency, read-only."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import grpc
import pytest

from tests.csi.conftest import CsiEnv, Mode, Plugin, mounts_under

pytestmark = pytest.mark.fuse


def read_tree(root: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = Path(path).read_bytes()
    return out


def test_dataset_volume_serves_the_resolved_version_read_only(plugin: Plugin, csi_env: CsiEnv) -> None:
    target = csi_env.target("ds-latest")
    plugin.publish(target, {"dataset": "imgs", "version": "latest"})
    try:
        assert read_tree(target) == csi_env.files[2]
        [record] = [p for p in plugin.state() if p["target_path"] == target]
        assert record["resolved"] == "imgs@v2"
        with pytest.raises(OSError) as exc:
            Path(target, "new.txt").write_bytes(b"x")
        assert exc.value.errno == errno.EROFS
        # the same request again is a no-op
        plugin.publish(target, {"dataset": "imgs", "version": "latest"})
        # a different request for the same target is refused, and changes nothing
        with pytest.raises(grpc.RpcError) as err:
            plugin.publish(target, {"dataset": "imgs", "version": "1"})
        assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert Path(target, "README").read_bytes() == b"v2\n"
    finally:
        plugin.unpublish(target)
    assert not os.path.exists(target)
    assert mounts_under(Path(target).parent) == []
    plugin.unpublish(target)  # already gone: still success
    assert [p for p in plugin.state() if p["target_path"] == target] == []


def test_tag_and_prefix_show_that_part_of_that_version(plugin: Plugin, csi_env: CsiEnv) -> None:
    target = csi_env.target("ds-tag-prefix")
    plugin.publish(target, {"dataset": "imgs", "version": "stable", "prefix": "train"}, volume_id="vol-tag")
    try:
        v1 = csi_env.files[1]
        assert read_tree(target) == {
            k.removeprefix("train/"): v for k, v in v1.items() if k.startswith("train/")
        }
    finally:
        plugin.unpublish(target, "vol-tag")


def test_version_is_resolved_once_at_publish(plugin: Plugin, csi_env: CsiEnv) -> None:
    target = csi_env.target("ds-pinned")
    plugin.publish(target, {"dataset": "imgs"}, volume_id="vol-pinned")  # version defaults to latest
    try:
        csi_env.commit("imgs", {"README": b"v3\n"})  # a new head after publish
        assert Path(target, "README").read_bytes() == b"v2\n"
        [record] = [p for p in plugin.state() if p["target_path"] == target]
        assert record["resolved"] == "imgs@v2"
    finally:
        plugin.unpublish(target, "vol-pinned")


@pytest.mark.parametrize(
    ("context", "code"),
    [
        ({"dataset": "nosuch"}, grpc.StatusCode.NOT_FOUND),
        ({"dataset": "imgs", "version": "99"}, grpc.StatusCode.NOT_FOUND),
        ({"dataset": "imgs", "version": "notag"}, grpc.StatusCode.NOT_FOUND),
        ({"dataset": "imgs", "prefix": "nosuch/dir"}, grpc.StatusCode.NOT_FOUND),
        ({"dataset": "Bad Name"}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"dataset": "imgs", "workspace": "w"}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"dataset": "imgs", "colour": "red"}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"dataset": "imgs", "prefix": "../etc"}, grpc.StatusCode.INVALID_ARGUMENT),
        ({}, grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
def test_bad_volumes_get_the_spec_error_and_leave_nothing(
    plugin: Plugin, csi_env: CsiEnv, context: dict, code: grpc.StatusCode
) -> None:
    target = csi_env.target("bad")
    with pytest.raises(grpc.RpcError) as err:
        plugin.publish(target, context, volume_id="vol-bad")
    assert err.value.code() == code, err.value.details()
    assert not os.path.exists(target) or os.listdir(target) == []
    assert not [p for p in mounts_under(csi_env.root) if "/bad/" in p]
    assert [p for p in plugin.state() if p["target_path"] == target] == []
    recorded = {p["volume_dir"] for p in plugin.state()}
    # no per-volume dir (config file with credentials, FUSE mount) left behind
    assert [d for d in (plugin.state_dir / "volumes").iterdir() if str(d) not in recorded] == []
    assert [m for m in mounts_under(plugin.state_dir) if not any(m.startswith(r) for r in recorded)] == []


def test_workspace_volume_is_writable_and_flushed_and_committed_on_unpublish(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    target = csi_env.target("ws")
    context = {"workspace": "run-1", "commitTo": "outputs"}
    plugin.publish(target, context, volume_id="ws-1")
    try:
        Path(target, "ckpt").mkdir()
        Path(target, "ckpt", "step1.pt").write_bytes(b"weights" * 1000)
        assert Path(target, "ckpt", "step1.pt").read_bytes() == b"weights" * 1000
    finally:
        plugin.unpublish(target, "ws-1")
    assert not os.path.exists(target)
    from datahub.catalog import open_catalog

    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        [record] = list(catalog.list_records("outputs", None))
    finally:
        catalog.close()
    assert record.key == "ckpt/step1.pt" and record.size == 7000
    key = record.url.split(f"s3://{csi_env.bucket}/", 1)[1]
    body = csi_env.endpoint.client().get_object(Bucket=csi_env.bucket, Key=key)["Body"].read()
    assert body == b"weights" * 1000


def test_readonly_publish_of_a_workspace_is_enforced(plugin: Plugin, csi_env: CsiEnv) -> None:
    target = csi_env.target("ws-ro")
    context = {"workspace": "ro-${pod.name}", **pod_info("default", "default")}  # an inline template
    plugin.publish(target, context, volume_id="ws-ro", mode=Mode.SINGLE_NODE_READER_ONLY)
    try:
        with pytest.raises(OSError) as exc:
            Path(target, "x").write_bytes(b"x")
        assert exc.value.errno == errno.EROFS
        [record] = [p for p in plugin.state() if p["target_path"] == target]
        assert record["spec"]["workspace"] == "ro-trainer-0"
    finally:
        plugin.unpublish(target, "ws-ro")
    with pytest.raises(grpc.RpcError) as err:  # a workspace has one owner: no multi-node modes
        plugin.publish(target, {"workspace": "run-ro"}, volume_id="ws-ro", mode=Mode.MULTI_NODE_MULTI_WRITER)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_bucket_volume_is_a_snapshot_of_the_prefix(plugin: Plugin, csi_env: CsiEnv) -> None:
    client = csi_env.endpoint.client()
    client.put_object(Bucket=csi_env.bucket, Key="raw/x/1.txt", Body=b"one")
    client.put_object(Bucket=csi_env.bucket, Key="raw/2.txt", Body=b"two")
    target = csi_env.target("bucket")
    # as the kubelet sends a CSI ephemeral inline volume: a generated id, the ephemeral flag, pod info
    inline = {"csi.storage.k8s.io/ephemeral": "true", **pod_info("default", "default")}
    volume_id = "csi-3f2a9c0d5e6b7a8f"
    own = {"s3AccessKeyId": csi_env.endpoint.access_key, "s3SecretAccessKey": csi_env.endpoint.secret_key}
    context = {"bucket": csi_env.bucket, "prefix": "raw", **inline}
    plugin.publish(
        target, context, volume_id=volume_id, secrets=own
    )  # a bucket volume brings its credentials
    try:
        assert Path(target, "x", "1.txt").read_bytes() == b"one"
        assert Path(target, "2.txt").read_bytes() == b"two"
        assert json.loads(Path(target, ".datahub").read_bytes())["source"] == f"s3://{csi_env.bucket}/raw"
    finally:
        plugin.unpublish(target, volume_id)


def pod_info(namespace: str, account: str) -> dict[str, str]:
    """What the kubelet adds to the volume context with podInfoOnMount."""
    return {
        "csi.storage.k8s.io/pod.name": "trainer-0",
        "csi.storage.k8s.io/pod.namespace": namespace,
        "csi.storage.k8s.io/pod.uid": "0b9f7c1e",
        "csi.storage.k8s.io/serviceAccount.name": account,
    }


def test_dataset_access_lists_apply_to_the_pods_service_account(plugin: Plugin, csi_env: CsiEnv) -> None:
    from datahub.catalog import open_catalog

    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("private", acl={"system:serviceaccount:team-a:trainer": "reader"})
        catalog.create_dataset("results", acl={"system:serviceaccount:team-a:trainer": "reader"})
    finally:
        catalog.close()
    csi_env.commit("private", {"secret.txt": b"team a only"})
    target = csi_env.target("acl")
    for context in ({"dataset": "private"}, {"dataset": "private", **pod_info("team-b", "trainer")}):
        with pytest.raises(grpc.RpcError) as err:
            plugin.publish(target, context, volume_id="acl")
        # a dataset the pod may not read answers as a missing one (caller72)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND and "private" in err.value.details()
        assert not os.path.exists(target)
    with pytest.raises(grpc.RpcError) as err:  # committing into a dataset needs writer
        plugin.publish(target, {"workspace": "w-acl", "commitTo": "results", **pod_info("team-a", "trainer")})
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    plugin.publish(target, {"dataset": "private", **pod_info("team-a", "trainer")}, volume_id="acl")
    try:
        assert Path(target, "secret.txt").read_bytes() == b"team a only"
    finally:
        plugin.unpublish(target, "acl")


def test_a_workspace_commit_target_is_made_at_publish_for_the_pod(plugin: Plugin, csi_env: CsiEnv) -> None:
    """audit13: the writer check on ``commitTo`` ran only if that dataset existed, and the
    commit at unpublish took whatever dataset had the name by then: another token created it,
    owned it, granted ``*`` the writer role and received the pod's outputs. The dataset is now
    made at publish, owned by the pod's service account; the name is no longer free."""
    from datahub.catalog import open_catalog
    from datahub.errors import AlreadyExists

    target = csi_env.target("ws-own")
    pod = pod_info("team-a", "trainer")
    plugin.publish(target, {"workspace": "w-own", "commitTo": "own-results", **pod}, volume_id="w-own")
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        try:
            made = catalog.get_dataset("own-results")
            assert (made.owner, made.acl) == ("system:serviceaccount:team-a:trainer", {})
            with pytest.raises(AlreadyExists):
                catalog.create_dataset("own-results", owner="mallory", acl={"*": "writer"})
            Path(target, "out.txt").write_bytes(b"the pod's outputs")
        finally:
            plugin.unpublish(target, "w-own")
        [record] = list(catalog.list_records("own-results", None))
        assert record.key == "out.txt" and catalog.get_dataset("own-results").owner == made.owner
        with pytest.raises(grpc.RpcError) as err:  # another pod may not commit into it
            plugin.publish(
                target,
                {"workspace": "w-b", "commitTo": "own-results", **pod_info("team-b", "x")},
                volume_id="w-b",
            )
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        catalog.close()


def test_a_workspace_volume_its_pod_wrote_nothing_in_unpublishes(plugin: Plugin, csi_env: CsiEnv) -> None:
    """An empty change set makes no version; the commit at unpublish failed on it
    (INVALID_ARGUMENT "no changes"), so the kubelet could never unpublish such a volume."""
    target = csi_env.target("ws-empty")
    plugin.publish(target, {"workspace": "w-empty", "commitTo": "empty-results"}, volume_id="w-empty")
    Path(target, "logs").mkdir()
    plugin.unpublish(target, "w-empty")
    assert not os.path.exists(target)


def test_a_workspace_is_published_at_one_target_per_node(plugin: Plugin, csi_env: CsiEnv) -> None:
    first, second = csi_env.target("ws-one"), csi_env.target("ws-two")
    plugin.publish(first, {"workspace": "single"}, volume_id="single")
    try:
        with pytest.raises(grpc.RpcError) as err:
            plugin.publish(second, {"workspace": "single"}, volume_id="single")
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION, err.value.details()
        assert not os.path.exists(second)
        Path(first, "still.txt").write_bytes(b"fine")  # the first one is untouched
    finally:
        plugin.unpublish(first, "single")


def test_concurrent_publishes_and_unpublishes_are_all_recorded(plugin: Plugin, csi_env: CsiEnv) -> None:
    from concurrent.futures import ThreadPoolExecutor

    targets = {f"par-{i}": csi_env.target(f"par-{i}") for i in range(3)}
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda item: plugin.publish(item[1], {"dataset": "imgs", "version": "1"}, volume_id=item[0]),
                      targets.items()))  # fmt: skip
    try:
        recorded = {p["target_path"]: p["volume_id"] for p in plugin.state()}
        assert {t: v for t, v in recorded.items() if t in targets.values()} == {
            t: v for v, t in targets.items()
        }
        for target in targets.values():
            assert Path(target, "README").read_bytes() == b"v1\n"
    finally:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda item: plugin.unpublish(item[1], item[0]), targets.items()))
    assert not set(targets.values()) & {p["target_path"] for p in plugin.state()}
