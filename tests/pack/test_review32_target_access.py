"""review32: the target ``datahub pack`` creates is readable by the source's readers only.

It was created with no owner and no access list. The API hides such a dataset from every
token but a global admin's, but the CSI plugin opens it to every pod (docs/csi.md, "A dataset
with no access list and no owner is open to every pod"): a pod with no role on a restricted
source mounted its packed copy (the source's pictures, resized) as soon as a pack run with
the deployment's catalog made it. Now the target starts with the source's owner and access
list as readers (an open source still gives an open target); its admins grant more later
(docs/pack.md: a team may share the pack and not the originals).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from csi.access import require as pod_may
from datahub.api.access import Principal, can
from datahub.catalog import Catalog
from datahub.config import Config
from datahub.errors import AccessDenied
from datahub.pack import PackSpec, start_job
from datahub.tasks import open_task_queue
from tests.pack.conftest import import_manifest, write_source

TEAM_A = "system:serviceaccount:team-a:trainer"
TEAM_B = "system:serviceaccount:team-b:trainer"


def _pack(config: Config, catalog: Catalog, tmp_path: Path) -> None:
    queue = open_task_queue(config.resolved_catalog_url)
    try:
        start_job(catalog, queue, "photos", "out", PackSpec.parse(resize="shorter=40"))
    finally:
        queue.close()


def test_a_pod_with_no_role_on_the_source_may_not_mount_its_pack(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 2), "photos")
    catalog.update_dataset("photos", owner="bob", acl={TEAM_A: "reader", "alice": "writer"})
    _pack(config, catalog, tmp_path)
    target = catalog.get_dataset("out")
    with pytest.raises(AccessDenied):
        pod_may(target, TEAM_B, "reader")
    pod_may(target, TEAM_A, "reader")  # the source's readers read the pack
    for who in ("bob", "alice"):
        assert can(Principal(who), target, "reader")
        assert not can(Principal(who), target, "writer")  # reading only: no role beyond it
    assert not can(Principal("eve"), target, "reader")


def test_an_open_source_gives_an_open_target(config: Config, catalog: Catalog, tmp_path: Path) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 2), "photos")
    _pack(config, catalog, tmp_path)
    target = catalog.get_dataset("out")
    assert not target.acl and not target.owner
    pod_may(target, TEAM_B, "reader")
