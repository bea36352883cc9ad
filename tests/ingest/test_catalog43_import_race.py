"""catalog43: two imports into one new dataset at once.

An import lists its source, then creates the dataset it found missing, then commits on base 0.
When another import (or an API caller) created the name meanwhile, the create raised
AlreadyExists, "dataset 'pets' already exists; pick another name": the wrong advice for the
name the user asked for, and the import was lost even when nothing had been committed there.
Now the commit on base 0 decides: exactly one import makes version 1, and the other is told
that another commit won and to run it again, with nothing of it visible.

The competitor runs inside the first import's progress callback (called per listed object,
after the import found the dataset missing), on a second Catalog of the same SQLite file:
the same interleaving two processes have, every time.
"""

from __future__ import annotations

import pytest

from datahub.catalog import open_catalog
from datahub.errors import StaleBase
from datahub.ingest import import_source
from tests.ingest.conftest import write_tree


class _Once:
    """A progress sink that runs ``action`` at the first object listed."""

    def __init__(self, action) -> None:
        self.action, self.done = action, False

    def update(self, n: int = 1, nbytes: int = 0) -> None:
        if not self.done:
            self.done = True
            self.action()


def test_a_dataset_created_meanwhile_is_committed_into(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", {"a.jpg": b"a", "b.jpg": b"b"})

    def other_creates() -> None:
        with open_catalog(config.resolved_catalog_url) as other:
            other.create_dataset("pets", description="made by someone else meanwhile")

    report = import_source(catalog, config, stores, str(src), "pets", progress=_Once(other_creates))
    assert report.version is not None and report.version.seq == 1
    assert [r.key for r in catalog.list_records("pets", 1)] == ["a.jpg", "b.jpg"]
    assert catalog.get_dataset("pets").description == "made by someone else meanwhile"


def test_the_second_of_two_imports_into_a_new_dataset_is_a_clear_conflict(tmp_path, config, catalog, stores):
    mine = write_tree(tmp_path / "mine", {"a.jpg": b"a", "b.jpg": b"b"})
    theirs = write_tree(tmp_path / "theirs", {"c.jpg": b"c"})

    def other_imports() -> None:
        with open_catalog(config.resolved_catalog_url) as other:
            import_source(other, config, stores, str(theirs), "pets")

    with pytest.raises(StaleBase) as raised:
        import_source(catalog, config, stores, str(mine), "pets", progress=_Once(other_imports))
    message = raised.value.message
    assert "'pets'" in message and "version 1" in message and "run the import again" in message
    assert raised.value.details["dataset"] == "pets"
    # exactly one won: version 1 is the other import's, nothing of this one is visible
    assert catalog.store.head("pets") == 1
    assert [r.key for r in catalog.list_records("pets", 1)] == ["c.jpg"]
    # and running it again converges: the new head plus only what differs
    again = import_source(catalog, config, stores, str(mine), "pets")
    assert again.version is not None and again.version.seq == 2
    assert (again.added, again.removed, again.modified) == (2, 1, 0)
    assert [r.key for r in catalog.list_records("pets", 2)] == ["a.jpg", "b.jpg"]


def test_an_import_beaten_on_an_existing_dataset_says_to_run_it_again(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", {"a.jpg": b"a"})
    first = write_tree(tmp_path / "first", {"z.jpg": b"z"})
    import_source(catalog, config, stores, str(first), "pets")

    def other_imports() -> None:
        with open_catalog(config.resolved_catalog_url) as other:
            import_source(other, config, stores, str(tmp_path / "src"), "pets")

    with pytest.raises(StaleBase) as raised:
        import_source(catalog, config, stores, str(src), "pets", progress=_Once(other_imports))
    assert "planned against version 1" in raised.value.message
    assert "another commit made version 2" in raised.value.message
    assert catalog.store.head("pets") == 2


def test_an_import_into_a_dataset_hidden_from_its_token_still_names_the_missing_role(
    tmp_path, config, stores
):
    """Not a race: over a remote catalog the name is taken by a dataset this token may not see,
    so the import finds it missing; the server's 409 (naming the role to ask for) must reach the
    user, not a commit's 'not found' (platform14)."""
    from datahub.api.tokens import issue_token
    from datahub.catalog import Catalog
    from datahub.catalog.http_store import HttpCatalogStore
    from datahub.errors import AlreadyExists
    from tests.catalog.remote import serve

    server, backing, _ = serve(tmp_path / "server")
    backing.create_dataset("results", owner="team-a")
    node = Catalog(HttpCatalogStore(server.url, token=issue_token(backing.store, "csi-node")[0]))
    try:
        src = write_tree(tmp_path / "src", {"a.jpg": b"a"})
        with pytest.raises(AlreadyExists, match="'csi-node' holds no role on it"):
            import_source(node, config, stores, str(src), "results")
        assert backing.store.head("results") == 0
    finally:
        node.close()
        server.stop()
        backing.close()
