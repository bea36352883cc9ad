"""sec24: an inline volume published without the kubelet's pod info is refused, not served.

The kubelet names an inline (ephemeral) volume ``csi-<sha256>`` and never stages it; with
``podInfoOnMount`` on, it adds ``csi.storage.k8s.io/ephemeral: "true"`` and the pod's name,
namespace and service account to the volume context. With it off, none of them came, and the
plugin published the volume anyway, as if it were authorized: a workspace unscoped by the pod's
namespace (another namespace's pod naming the same one opened its files), a dataset checked for
no pod. Driven over the plugin's socket as the kubelet calls it."""

from __future__ import annotations

import hashlib
import os

import grpc
import pytest

from tests.csi.conftest import CsiEnv, Plugin
from tests.csi.test_publish import pod_info

pytestmark = pytest.mark.fuse

INLINE_ID = "csi-" + hashlib.sha256(b"0b9f7c1e-eval").hexdigest()  # as the kubelet makes it
EPHEMERAL = {"csi.storage.k8s.io/ephemeral": "true"}


def _refused(plugin: Plugin, target: str, context: dict[str, str], volume_id: str) -> str:
    try:
        with pytest.raises(grpc.RpcError) as err:
            plugin.publish(target, context, volume_id=volume_id)
    finally:
        if any(p["target_path"] == target for p in plugin.state()):  # before the fix: published
            plugin.unpublish(target, volume_id)
    details = err.value.details()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, details
    assert repr(volume_id) in details and "inline (ephemeral) volume" in details, details
    assert "set podInfoOnMount: true on the CSIDriver" in details, details
    assert not os.path.exists(target) and not any(p["target_path"] == target for p in plugin.state())
    return details


def test_an_inline_volume_without_pod_info_is_invalid_argument(plugin: Plugin, csi_env: CsiEnv) -> None:
    csi_env.commit("open-sec24", {"a.txt": b"a"})  # no access list: open to every pod
    target = csi_env.target("sec24-inline")
    for context in ({"workspace": "eval"}, {"dataset": "open-sec24"}):
        details = _refused(plugin, target, context, INLINE_ID)
        assert "csi.storage.k8s.io/ephemeral," in details and "pod.namespace" in details, details
    # the flag alone, or pod info without the flag, is not what the kubelet sends either
    details = _refused(plugin, target, {"dataset": "open-sec24", **EPHEMERAL}, INLINE_ID)
    assert "ephemeral" not in details.partition("sent no")[2].partition("with it")[0], details
    assert "serviceAccount.name" in details, details
    _refused(plugin, target, {"dataset": "open-sec24", **pod_info("team-a", "trainer")}, INLINE_ID)
    _refused(plugin, target, {"workspace": "eval", **EPHEMERAL}, "inline-elsewhere")  # another CO's id


def test_an_inline_volume_with_the_kubelets_pod_info_is_published(plugin: Plugin, csi_env: CsiEnv) -> None:
    csi_env.commit("open-sec24b", {"b.txt": b"b"})
    target = csi_env.target("sec24-inline-ok")
    plugin.publish(
        target, {"dataset": "open-sec24b", **EPHEMERAL, **pod_info("team-a", "trainer")}, volume_id=INLINE_ID
    )
    try:
        with open(os.path.join(target, "b.txt"), "rb") as fh:
            assert fh.read() == b"b"
    finally:
        plugin.unpublish(target, INLINE_ID)
    # a volume that is not inline (no csi- handle, no ephemeral flag) needs no pod info, as before
    plain = csi_env.target("sec24-plain")
    plugin.publish(plain, {"dataset": "open-sec24b"}, volume_id="pv-sec24")
    plugin.unpublish(plain, "pv-sec24")
