"""catalog43: a derive of a dataset's head into itself never undoes a commit that landed meanwhile.

``derive(ds, "latest", where)`` resolved ``latest`` (version H) and then read the head again to
commit on: a commit that landed in between (LabelX, an import, another derive) made the head
H+1, and the derive committed ``filter(H)`` on top of it, silently reverting H+1 (a record H+1
added was deleted, its labels undone). The API's derive route resolved the ref to a number
first, so it did the same for ``latest``. Now a derive that follows the head commits on the
version it filtered, and like a commit on the head it starts again on the new head when it
lost the race before a change was read: the result is ``filter(H+1)``.

The competing commit runs in ``may_write`` (the API's role check), which ``derive`` calls
after resolving the source and before reading the head: the interleaving of two writers,
deterministically, on every store.
"""

from __future__ import annotations

from datahub.catalog import Catalog, Put
from tests.catalog.conftest import rec


def _pets(catalog: Catalog) -> None:
    catalog.create_dataset("pets")
    catalog.commit(
        "pets", [Put(rec(k, labels={"class": c})) for k, c in (("a", "cat"), ("b", "dog"), ("c", "cat"))]
    )


def test_a_commit_landing_during_a_derive_of_latest_into_itself_is_kept(catalog: Catalog) -> None:
    _pets(catalog)
    landed: list[int] = []

    def meanwhile(target) -> None:  # another writer's commit, once
        if not landed:
            v = catalog.commit(
                "pets", [Put(rec("d", labels={"class": "cat"})), Put(rec("e", labels={"class": "dog"}))]
            )
            landed.append(v.seq)

    version = catalog.derive("pets", "latest", "labels.class=cat", may_write=meanwhile)
    assert landed == [2] and version.seq == 3
    # the cats of version 2, the head when the derive committed: d, which version 2 added, stays
    assert [r.key for r in catalog.list_records("pets", 3)] == ["a", "c", "d"]
    assert version.lineage == {"derived_from": "pets@v2", "filter": "labels.class=cat"}
    assert (version.added, version.removed, version.modified, version.record_count) == (0, 2, 0, 3)


def test_a_derive_of_a_named_version_into_itself_still_commits_that_version(catalog: Catalog) -> None:
    _pets(catalog)
    catalog.commit("pets", [Put(rec("d", labels={"class": "cat"}))])
    # an explicit version is what the caller asked for, head or not
    version = catalog.derive("pets", 1, "labels.class=cat")
    assert version.seq == 3 and [r.key for r in catalog.list_records("pets", 3)] == ["a", "c"]
    assert version.lineage["derived_from"] == "pets@v1"


def test_a_derive_into_another_dataset_is_the_filter_of_the_source_it_named(catalog: Catalog) -> None:
    _pets(catalog)
    catalog.create_dataset("cats")
    catalog.commit("cats", [Put(rec("z"))])
    landed: list[int] = []

    def meanwhile(target) -> None:
        if not landed:
            landed.append(catalog.commit("cats", [Put(rec("y"))]).seq)

    version = catalog.derive("pets", "latest", "labels.class=cat", to_dataset="cats", may_write=meanwhile)
    assert landed == [2] and version.seq == 3
    assert [r.key for r in catalog.list_records("cats", 3)] == ["a", "c"]
    assert (version.added, version.removed, version.record_count) == (2, 2, 2)
