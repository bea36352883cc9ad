"""Property: any sequence of source states, imported one after another, yields versions whose
listings equal the source, exactly one version per state that differs from the previous one,
and a diff that names exactly the keys that were added, removed or changed."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datahub.catalog import open_catalog
from datahub.config import load_config
from datahub.ingest import import_source
from datahub.storage import StoreRegistry, drop_memory_space, open_store

KEYS = st.sampled_from(["a", "a/b", "a/b/c", "a.b", "a-b", "b", "b/a", "z/ü", "0", "a/b0"])
STATE = st.dictionaries(KEYS, st.binary(min_size=0, max_size=3), max_size=8)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(states=st.lists(STATE, min_size=1, max_size=5), copy=st.booleans())
def test_import_sequences_match_a_reference_model(tmp_path, states, copy):
    run = uuid.uuid4().hex[:8]
    config = load_config(env={}, overrides={"home": str(tmp_path / run)})
    config.home_path.mkdir(parents=True)
    catalog = open_catalog(config.resolved_catalog_url)
    stores = StoreRegistry(config)
    space = f"prop-{run}"
    source = open_store(f"memory://{space}", config)
    try:
        previous: dict[str, bytes] = {}
        versions = 0
        for state in states:
            for key in set(previous) - set(state):
                source.delete(key)
            for key, data in state.items():
                if previous.get(key) != data:
                    source.put(key, data)
            report = import_source(catalog, config, stores, f"memory://{space}", "ds", copy=copy)
            changed = {k for k in set(previous) | set(state) if previous.get(k) != state.get(k)}
            if not changed:
                assert report.version is None
            else:
                versions += 1
                assert report.version is not None and report.version.seq == versions
                diff = {e.key: e.kind for e in catalog.diff("ds", versions - 1, versions)}
                assert set(diff) == changed
                assert {k for k, kind in diff.items() if kind == "added"} == changed - set(previous)
                assert {k for k, kind in diff.items() if kind == "removed"} == changed - set(state)
            if versions:
                listed = {}
                for record in catalog.list_records("ds", versions):
                    store, key = stores.for_url(record.url)
                    listed[record.key] = store.read(key, etag=record.etag)
                assert listed == state
            previous = state
    finally:
        stores.close()
        catalog.close()
        drop_memory_space(space)
