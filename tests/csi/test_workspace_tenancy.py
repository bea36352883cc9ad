"""An inline workspace belongs to the pod's namespace.

Anyone who may create a pod may write a CSI ephemeral inline volume, and a workspace is
found by its name: the files it holds stay in the node's journal and under
``<objects_url>/workspaces/<name>/`` after its pod is gone. So a pod of another namespace
naming the same workspace (on purpose, or because both templates say ``eval-${pod.name}``
and pod names are unique only within a namespace) opened the first one's files, read them
and could overwrite them. An inline workspace's name is now taken within the pod's
namespace (``<namespace>.<name>``), so names written in different namespaces never meet.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.csi.conftest import CsiEnv, Plugin
from tests.csi.test_publish import pod_info
from tests.writeback.flushed import workspace_object_key

pytestmark = pytest.mark.fuse


def _inline(namespace: str) -> dict[str, str]:
    return {
        "workspace": "eval-${pod.name}",
        "csi.storage.k8s.io/ephemeral": "true",
        **pod_info(namespace, "default"),
    }


def test_a_pod_of_another_namespace_never_opens_a_workspace_of_the_same_name(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    first = csi_env.target("tenant-a")
    plugin.publish(first, _inline("team-a"), volume_id="csi-a")
    try:
        Path(first, "model.pt").write_bytes(b"team a's weights")
        [record] = [p for p in plugin.state() if p["target_path"] == first]
        assert record["spec"]["workspace"] == "team-a.eval-trainer-0"
    finally:
        plugin.unpublish(first, "csi-a")
    second = csi_env.target("tenant-b")
    plugin.publish(second, _inline("team-b"), volume_id="csi-b")  # the same template, pod name and node
    try:
        assert os.listdir(second) == []
        Path(second, "model.pt").write_bytes(b"team b's weights")
    finally:
        plugin.unpublish(second, "csi-b")
    client = csi_env.endpoint.client()
    for namespace, data in (("team-a", b"team a's weights"), ("team-b", b"team b's weights")):
        key = workspace_object_key(client, csi_env.bucket, f"{namespace}.eval-trainer-0", "model.pt")
        assert client.get_object(Bucket=csi_env.bucket, Key=key)["Body"].read() == data
    again = csi_env.target("tenant-a-again")  # the namespace's own next pod finds its files
    plugin.publish(again, _inline("team-a"), volume_id="csi-a2")
    try:
        assert Path(again, "model.pt").read_bytes() == b"team a's weights"
    finally:
        plugin.unpublish(again, "csi-a2")
