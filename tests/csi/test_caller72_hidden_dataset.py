"""caller72: a dataset volume the pod may not read answers as one that does not exist.

NodePublishVolume checks the pod's service account against the dataset's access list
(docs/csi.md, "Who may publish what"). It answered PERMISSION_DENIED naming the dataset (and
"a snapshot of bucket s3://…" for a bucket snapshot) when the dataset exists and the pod holds
no role on it, and NOT_FOUND when it does not exist: whoever may create a pod learned which
dataset names exist, and which are whose bucket snapshots, by naming them in inline volumes,
though the API answers such a dataset as a missing one (docs/api.md, "403 or 404"). The CSI
spec's NOT_FOUND for NodePublishVolume is "volume does not exist", whose recovery is to check
the volume id "and that the volume is accessible": both cases now answer it, with one message
that says both ways on and depends on nothing but the name and the pod.
"""

from __future__ import annotations

import os

import grpc
import pytest

from datahub.catalog import open_catalog
from tests.csi.conftest import CsiEnv, Plugin
from tests.csi.test_publish import pod_info

pytestmark = pytest.mark.fuse

POD = pod_info("team-x", "prober")
PRINCIPAL = "system:serviceaccount:team-x:prober"


def _refusal(plugin: Plugin, env: CsiEnv, context: dict[str, str], name: str) -> tuple[grpc.StatusCode, str]:
    target = env.target(name)
    inline = {"csi.storage.k8s.io/ephemeral": "true", **POD}
    with pytest.raises(grpc.RpcError) as err:
        plugin.publish(target, {**context, **inline}, volume_id=name)
    assert not os.path.exists(target)
    return err.value.code(), err.value.details()


def test_a_dataset_hidden_from_the_pod_answers_as_a_missing_one(plugin: Plugin, csi_env: CsiEnv) -> None:
    csi_env.commit("caller72-private", {"secret.txt": b"team a only\n"})
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        catalog.update_dataset("caller72-private", owner="alice", acl={"bob": "reader"})
        catalog.create_dataset("s3.caller72.snap", source="s3://caller72/snap")  # as a bucket mount makes it
    finally:
        catalog.close()
    answers = {
        name: _refusal(plugin, csi_env, {"dataset": name, **extra}, f"c72-{i}")
        for i, (name, extra) in enumerate(
            (
                ("caller72-private", {}),
                ("caller72-missing", {}),
                ("s3.caller72.snap", {}),
                ("s3.caller72.gone", {}),
            )
        )
    }
    # a version or prefix that does not exist says nothing more of a hidden dataset either
    answers["caller72-private@v9"] = _refusal(
        plugin, csi_env, {"dataset": "caller72-private", "version": "9"}, "c72-v9"
    )
    for name, (code, details) in answers.items():
        dataset = name.partition("@")[0]
        assert code == grpc.StatusCode.NOT_FOUND, (name, code, details)
        generic = details.replace(repr(dataset), "'D'").replace(f"update {dataset} ", "update D ")
        assert generic == answers["caller72-missing"][1].replace("'caller72-missing'", "'D'").replace(
            "update caller72-missing ", "update D "
        ), (name, details)
        assert "not found, or not readable by" in details and PRINCIPAL in details, details
        assert "alice" not in details and "bob" not in details and "s3://" not in details, details


def test_a_commit_target_named_as_a_bucket_snapshot_answers_alike_whether_it_exists(
    plugin: Plugin, csi_env: CsiEnv
) -> None:
    """A workspace's ``commitTo`` named as bucket mounts name their snapshots is refused when it
    does not exist (a pod making it stopped every mount of that bucket from recording). One that
    exists answered "needs the writer role on dataset 's3.…' (a snapshot of bucket s3://…)":
    which bucket prefixes had been mounted, with their URLs. A pod that may not read it now gets
    the missing name's answer."""
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("s3.caller72.mounted", source="s3://caller72/mounted")
    finally:
        catalog.close()
    answers = [
        _refusal(plugin, csi_env, {"workspace": f"c72-w{i}", "commitTo": name}, f"c72-w{i}")
        for i, name in enumerate(("s3.caller72.mounted", "s3.caller72.never"))
    ]
    assert [code for code, _ in answers] == [grpc.StatusCode.PERMISSION_DENIED] * 2, answers
    mounted, never = (details for _, details in answers)
    assert mounted.replace("mounted", "never") == never, answers
    assert "s3://" not in mounted, mounted
