"""A workspace volume whose ``commitTo`` names a dataset the node's token may not read
(docs/kubernetes.md, "The server"; platform14).

A team's admin creates ``team-results`` and grants its pods' service account the writer role,
as docs/kubernetes.md says, but not the node plugin's token. The server hides the dataset from
that token, so the plugin's publish found it "missing", tried to create it, was told the name
is taken, looked it up again and answered NOT_FOUND "dataset 'team-results' not found; create
it first": advice that cannot work (it exists), naming neither the token nor the role. The
publish is now PERMISSION_DENIED naming the dataset, the node token's principal and the role
to grant it.

And the shipped examples (csi/deploy/example-*.yaml) publish, read and commit with their
attributes as written, through such a node with the grants the docs tell an operator to give.
"""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest

from datahub.catalog import open_catalog
from tests.csi.conftest import CsiEnv, Mode, Plugin, mounts_under
from tests.csi.test_api_catalog import api_module_plugin, api_plugin
from tests.csi.test_deploy import load_all
from tests.csi.test_publish import pod_info

pytestmark = pytest.mark.fuse
__all__ = ["api_module_plugin", "api_plugin"]  # the fixtures, used by name

SA = "system:serviceaccount:team-a:trainer"
READ_ONLY_MANY = Mode.MULTI_NODE_READER_ONLY


@pytest.fixture
def eval_results(csi_env: CsiEnv) -> str:
    """The team's dataset, its pods' service account a writer, the node's token nothing (the
    environment is this module's own, so it stays)."""
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("team-results", owner="team-a-admin", acl={SA: "writer"})
    finally:
        catalog.close()
    return "team-results"


def test_a_commit_to_a_dataset_hidden_from_the_node_token_names_the_token_and_the_role(
    api_plugin: Plugin, csi_env: CsiEnv, eval_results: str
) -> None:
    target = csi_env.target("eval-inline")
    context = {
        "workspace": "eval-${pod.name}",
        "commitTo": eval_results,
        "csi.storage.k8s.io/ephemeral": "true",
        **pod_info("team-a", "trainer"),
    }
    with pytest.raises(grpc.RpcError) as err:
        api_plugin.publish(target, context, volume_id="eval-inline")
    details = err.value.details()
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, details
    assert "'team-results'" in details and "'csi-node' holds no role on it" in details, details
    assert "--grant csi-node=writer" in details and "create it first" not in details, details
    assert api_plugin.state() == []


def _example_volumes() -> dict[str, dict]:
    """The ``csi`` volume sources of the shipped examples, by the name the docs give them."""
    sources = {}
    for obj in [d for docs in load_all().values() for d in docs]:
        if obj.get("kind") == "PersistentVolume":
            sources[obj["metadata"]["name"]] = obj["spec"]["csi"]
        if obj.get("kind") == "Pod":
            for volume in obj["spec"]["volumes"]:
                if "csi" in volume:
                    sources[volume["name"]] = volume["csi"]
    return sources


def test_the_shipped_examples_publish_through_the_server_as_the_docs_say(
    api_plugin: Plugin, csi_env: CsiEnv
) -> None:
    """docs/kubernetes.md "Use" with "The server": the example PV (imagenet@3, prefix train,
    staged then published), the inline pod's dataset (coco at tag best, its Secret's keys) and
    its workspace (``eval-${pod.name}``, commitTo eval-results), with the attributes exactly as
    csi/deploy/example-*.yaml write them, through a node whose catalog is the server and whose
    token holds only the grants the docs tell an operator to give."""
    volumes = _example_volumes()
    pod = "system:serviceaccount:default:default"
    versions = [{"train/a.bin": os.urandom(1000 + i), "val/b.bin": b"b"} for i in range(3)]
    for files in versions:
        csi_env.commit("imagenet", files)
    coco = {"x.jpg": b"coco\n"}
    csi_env.commit("coco", coco)
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        catalog.tag("coco", "best", 1)
        for name in ("imagenet", "coco"):
            catalog.update_dataset(name, owner="team-admin", acl={pod: "reader", "csi-node": "reader"})
        catalog.create_dataset("eval-results", owner="team-admin", acl={pod: "writer", "csi-node": "writer"})
    finally:
        catalog.close()
    secret = {"s3AccessKeyId": csi_env.endpoint.access_key, "s3SecretAccessKey": csi_env.endpoint.secret_key}

    pv = volumes["imagenet-v3-train"]
    staging, target = csi_env.target("pv-stage"), csi_env.target("trainer")
    Path(staging).mkdir()
    api_plugin.stage(staging, pv["volumeAttributes"], volume_id=pv["volumeHandle"], mode=READ_ONLY_MANY)
    try:
        api_plugin.publish(
            target,
            {**pv["volumeAttributes"], **pod_info("default", "default")},
            volume_id=pv["volumeHandle"],
            readonly=pv["readOnly"],
            mode=READ_ONLY_MANY,
            staging=staging,
        )
        assert sorted(os.listdir(target)) == ["a.bin"]
        assert Path(target, "a.bin").read_bytes() == versions[2]["train/a.bin"]
        api_plugin.unpublish(target, pv["volumeHandle"])
    finally:
        api_plugin.unstage(staging, pv["volumeHandle"])

    inline = {"csi.storage.k8s.io/ephemeral": "true", **pod_info("default", "default")}
    data, scratch = csi_env.target("eval-data"), csi_env.target("eval-scratch")
    api_plugin.publish(
        data,
        {**volumes["coco"]["volumeAttributes"], **inline},
        volume_id="coco",
        readonly=True,
        secrets=secret,
    )
    try:
        assert Path(data, "x.jpg").read_bytes() == coco["x.jpg"]
    finally:
        api_plugin.unpublish(data, "coco")
    api_plugin.publish(
        scratch, {**volumes["scratch"]["volumeAttributes"], **inline}, volume_id="scratch", secrets=secret
    )
    Path(scratch, "result.txt").write_text("done\n")
    api_plugin.unpublish(scratch, "scratch")
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        [record] = catalog.list_records("eval-results", "latest")
    finally:
        catalog.close()
    assert record.key == "result.txt" and record.size == 5
    assert api_plugin.state() == [] and mounts_under(csi_env.root / "pods") == []
