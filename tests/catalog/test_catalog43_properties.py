"""catalog43: random commits and derives against a dict model, on every store (the remote one too).

``test_properties.py`` holds commits and tags to the model on SQLite and mongomock; this adds
derives (of the head or a named version, into the dataset itself or another) and the remote
store, whose derive lists and commits through a real ``datahub serve``. Every version of both
datasets must list exactly the model's records, with exact counts, and name its source.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.catalog import Catalog, Record
from datahub.errors import NoChanges, RecordNotFound
from tests.catalog.conftest import make_store
from tests.catalog.test_properties import change_counts, draw_changes, model_apply

Model = dict[str, Record]


def _cats(state: Model) -> Model:
    return {k: r for k, r in state.items() if r.labels.get("class") == "cat"}


def _check_version(cat: Catalog, dataset: str, seq: int, parent: Model, expected: Model, version) -> None:
    assert version.seq == seq and version.record_count == len(expected)
    assert version.total_bytes == sum(r.size for r in expected.values())
    assert (version.added, version.removed, version.modified) == change_counts(parent, expected)
    assert {r.key: r for r in cat.list_records(dataset, seq)} == expected


def _run(kind: str, data: st.DataObject, api) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="catalog43-prop-"))
    store = (
        api.store(tmp, {"batch_size": 3, "page_size": 2})
        if kind == "http"
        else make_store(kind, tmp, batch_size=3, page_size=2)
    )
    cat = Catalog(store)
    versions: dict[str, list[Model]] = {"ds": [{}], "cats": [{}]}
    try:
        cat.create_dataset("ds")
        for _ in range(data.draw(st.integers(1, 8), label="operations")):
            ds = versions["ds"]
            if len(ds) == 1 or data.draw(st.integers(0, 2)):
                changes = draw_changes(data, ds[-1])
                expected = model_apply(ds[-1], changes)
                if expected is None or not changes:
                    with pytest.raises(RecordNotFound if changes else NoChanges):
                        cat.commit("ds", changes)
                    continue
                _check_version(cat, "ds", len(ds), ds[-1], expected, cat.commit("ds", changes))
                ds.append(expected)
                continue
            ref = data.draw(st.sampled_from(["latest", *range(1, len(ds))]), label="ref")
            target = data.draw(st.sampled_from(["ds", "cats"]), label="target")
            source = len(ds) - 1 if ref == "latest" else ref
            wanted, into = _cats(ds[source]), versions[target]
            if not wanted or wanted == into[-1]:
                with pytest.raises(NoChanges):
                    cat.derive("ds", ref, "labels.class=cat", to_dataset=None if target == "ds" else target)
                continue
            version = cat.derive("ds", ref, "labels.class=cat", to_dataset=None if target == "ds" else target)
            _check_version(cat, target, len(into), into[-1], wanted, version)
            assert version.lineage == {"derived_from": f"ds@v{source}", "filter": "labels.class=cat"}
            into.append(wanted)
    finally:
        cat.close()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("kind", ["sqlite", "mongomock", "http"])
def test_commits_and_derives_agree_with_the_model(kind: str, shared_api) -> None:
    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        _run(kind, data, shared_api)

    check()
