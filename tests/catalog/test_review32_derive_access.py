"""review32: a derive with no owner (the CLI's, on the deployment's catalog) gives its new
target the source's readers, not every pod.

Created with no owner and no access list, the target was open to every pod of the CSI plugin
(docs/csi.md, "A dataset with no access list and no owner is open to every pod"), a subset of
a restricted dataset with it. A derive that names an owner (the API's: the caller) still
copies nothing of the source's access (tests/api/test_auth.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from csi.access import require as pod_may
from datahub.catalog import Catalog, Put, Record
from datahub.catalog.sqlite_store import SQLiteCatalogStore
from datahub.errors import AccessDenied

TEAM_A = "system:serviceaccount:team-a:trainer"
TEAM_B = "system:serviceaccount:team-b:trainer"


@pytest.fixture
def catalog(tmp_path: Path):
    with Catalog(SQLiteCatalogStore(tmp_path / "c.db")) as cat:
        cat.create_dataset("pets", owner="bob", acl={TEAM_A: "reader", "alice": "writer"})
        cat.commit("pets", [Put(Record(f"{c}/{i}.jpg", f"memory://b/{c}{i}", "e", 1, labels={"class": c}))
                            for c in ("cat", "dog") for i in range(2)])  # fmt: skip
        yield cat


def test_a_cli_derive_gives_its_new_target_the_sources_readers_only(catalog: Catalog) -> None:
    catalog.derive("pets", None, "labels.class=cat", to_dataset="cats")
    cats = catalog.get_dataset("cats")
    with pytest.raises(AccessDenied):
        pod_may(cats, TEAM_B, "reader")
    pod_may(cats, TEAM_A, "reader")
    assert cats.acl == {TEAM_A: "reader", "alice": "reader", "bob": "reader"} and not cats.owner


def test_a_derive_with_an_owner_copies_nothing(catalog: Catalog) -> None:
    catalog.derive("pets", None, "labels.class=cat", to_dataset="cats", owner="carol")
    cats = catalog.get_dataset("cats")
    assert cats.owner == "carol" and cats.acl == {}
