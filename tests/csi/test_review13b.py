"""review13b: a workspace volume's ``commitTo`` dataset, made at publish (``csi.node._commit_target``).

Without FUSE or gRPC: the publish's access check (``csi.node._require``) against a real
SQLite catalog, as the plugin runs it on a node whose catalog is local (or whose token is a
global admin's, which the API lets create any name).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from csi.node import _require
from csi.volumes import VolumeSpec
from datahub.catalog import open_catalog
from datahub.errors import AccessDenied, DatasetNotFound

TRAINER_A = "system:serviceaccount:team-a:trainer"
TRAINER_B = "system:serviceaccount:team-b:trainer"


def _spec(commit_to: str, workspace: str = "w") -> VolumeSpec:
    return VolumeSpec(kind="workspace", workspace=workspace, commit_to=commit_to)


def test_two_pods_publishing_one_new_commit_target_at_once_get_one_owner(tmp_path: Path) -> None:
    """Both publishes find no dataset and make it; the one that loses the create is checked
    against the winner's dataset, so exactly one service account may commit into it."""
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    start = threading.Barrier(2)
    outcome: dict[str, str] = {}

    def publish(principal: str) -> None:
        catalog = open_catalog(url)
        try:
            start.wait()
            _require(catalog, _spec("race-out"), principal)
            outcome[principal] = "allowed"
        except AccessDenied:
            outcome[principal] = "denied"
        finally:
            catalog.close()

    threads = [threading.Thread(target=publish, args=(p,)) for p in (TRAINER_A, TRAINER_B)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    catalog = open_catalog(url)
    try:
        owner = catalog.get_dataset("race-out").owner
    finally:
        catalog.close()
    assert sorted(outcome.values()) == ["allowed", "denied"]
    assert outcome[owner] == "allowed"


@pytest.mark.parametrize("name", ["s3.tenant.data", "memory.space.x", "file.data", "rados.pool"])
def test_a_pod_cannot_take_a_bucket_snapshots_name_as_its_commit_target(tmp_path: Path, name: str) -> None:
    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        with pytest.raises(AccessDenied):
            _require(catalog, _spec(name), TRAINER_A)
        with pytest.raises(DatasetNotFound):
            catalog.get_dataset(name)
    finally:
        catalog.close()
