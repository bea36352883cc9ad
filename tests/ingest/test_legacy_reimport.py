"""A re-import over records whose meta/labels were stored before the depth limit (issue 24 item 5):
the fields the source does not mention are carried over as stored, never as the
``datahub_unreadable`` marker; ``--copy``, which must record the source in meta, is refused."""

from __future__ import annotations

import pytest

from datahub.catalog.model import Put, Record
from datahub.errors import InvalidInput
from datahub.ingest import import_source
from datahub.validation import Unreadable
from tests.ingest.conftest import write_tree


def nested(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


@pytest.fixture
def legacy(tmp_path, config, stores, catalog):
    """``ds`` at v2: a.jpg as imported, then (as an older datahub wrote it) with deep meta and labels."""
    src = write_tree(tmp_path / "src", {"a.jpg": b"a1", "b.jpg": b"b1"})
    import_source(catalog, config, stores, str(src), "ds")
    a = catalog.get_record("ds", 1, "a.jpg")
    deep = Record(a.key, a.url, a.etag, a.size, a.checksum, nested(40), nested(50))
    catalog.store.commit("ds", 1, [Put(deep)])
    return src


def test_a_reimport_carries_deep_fields_over_as_stored(legacy, config, stores, catalog):
    before = catalog.store.get_record("ds", 2, "a.jpg")
    write_tree(legacy, {"a.jpg": b"a2-changed"})
    report = import_source(catalog, config, stores, str(legacy), "ds")
    assert report.modified == 1 and report.version.seq == 3
    after = catalog.store.get_record("ds", 3, "a.jpg")
    for field in ("meta", "labels"):
        old, new = getattr(before, field), getattr(after, field)
        assert isinstance(new, Unreadable) and new.stored == old.stored  # the same text, byte for byte
    assert after.size == len(b"a2-changed")


def test_a_copy_reimport_of_such_a_record_is_refused_and_writes_nothing(legacy, config, stores, catalog):
    write_tree(legacy, {"a.jpg": b"a2-changed"})
    with pytest.raises(InvalidInput, match="cannot re-import 'a.jpg' with --copy"):
        import_source(catalog, config, stores, str(legacy), "ds", copy=True)
    assert catalog.store.head("ds") == 2
