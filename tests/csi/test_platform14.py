"""A workspace volume whose ``commitTo`` names a dataset the node's token may not read
(docs/kubernetes.md, "The server"; platform14).

A team's admin creates ``eval-results`` and grants its pods' service account the writer role,
as docs/kubernetes.md says, but not the node plugin's token. The server hides the dataset from
that token, so the plugin's publish found it "missing", tried to create it, was told the name
is taken, looked it up again and answered NOT_FOUND "dataset 'eval-results' not found; create
it first": advice that cannot work (it exists), naming neither the token nor the role. The
publish is now PERMISSION_DENIED naming the dataset, the node token's principal and the role
to grant it.
"""

from __future__ import annotations

import grpc
import pytest

from datahub.catalog import open_catalog
from tests.csi.conftest import CsiEnv, Plugin
from tests.csi.test_api_catalog import api_plugin
from tests.csi.test_publish import pod_info

pytestmark = pytest.mark.fuse
__all__ = ["api_plugin"]  # the fixture, used by name

SA = "system:serviceaccount:team-a:trainer"


@pytest.fixture
def eval_results(csi_env: CsiEnv) -> str:
    """The team's dataset, its pods' service account a writer, the node's token nothing (the
    environment is this module's own, so it stays)."""
    catalog = open_catalog(csi_env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("eval-results", owner="team-a-admin", acl={SA: "writer"})
    finally:
        catalog.close()
    return "eval-results"


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
    assert "'eval-results'" in details and "'csi-node' holds no role on it" in details, details
    assert "--grant csi-node=writer" in details and "create it first" not in details, details
    assert api_plugin.state() == []
