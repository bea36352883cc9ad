"""Importing a local directory: keys, etags, re-imports that commit only changes, --copy."""

from __future__ import annotations

import os
import threading

import pytest

from datahub.errors import Cancelled, InvalidKey, InvalidName, ObjectChanged
from datahub.ingest import import_source
from datahub.ingest.blobs import blob_key
from tests.ingest.conftest import write_tree

FILES = {"train/cat/1.jpg": b"cat-1", "train/dog/2.jpg": b"dog-2", "val/cat/3.jpg": b"cat-3"}


def listing(catalog, dataset, ref="latest"):
    return {r.key: r for r in catalog.list_records(dataset, ref)}


def test_import_directory_creates_v1_with_relative_keys_and_source_etags(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", FILES)
    report = import_source(catalog, config, stores, str(src), "pets", message="first", author="ann")
    assert report.version is not None and report.version.seq == 1
    assert (report.added, report.removed, report.modified, report.scanned) == (3, 0, 0, 3)
    records = listing(catalog, "pets")
    assert sorted(records) == sorted(FILES)
    store, key = stores.for_url(records["train/cat/1.jpg"].url)
    info = store.stat(key)
    assert records["train/cat/1.jpg"].etag == info.etag and records["train/cat/1.jpg"].size == 5
    assert store.read(key) == b"cat-1"
    v1 = catalog.resolve("pets", 1)
    assert (v1.message, v1.author, v1.lineage["import"]["source"]) == ("first", "ann", str(src))
    assert catalog.get_dataset("pets").source == str(src)
    assert catalog.get_dataset("pets").owner == ""  # an owner would be an API admin of it


def test_file_url_source_is_the_same_as_a_path(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", FILES)
    import_source(catalog, config, stores, src.as_uri(), "pets")
    again = import_source(catalog, config, stores, str(src), "pets")
    assert again.version is None


def test_reimport_without_changes_creates_no_version(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", FILES)
    import_source(catalog, config, stores, str(src), "pets")
    report = import_source(catalog, config, stores, str(src), "pets")
    assert report.version is None and report.changed == 0 and report.base == 1
    assert [v.seq for v in catalog.log("pets")] == [1]


def test_reimport_commits_only_added_removed_and_modified(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", FILES)
    import_source(catalog, config, stores, str(src), "pets")
    (src / "train/dog/2.jpg").unlink()
    (src / "train/cat/1.jpg").write_bytes(b"cat-1 but longer")
    write_tree(src, {"train/bird/9.jpg": b"bird"})
    report = import_source(catalog, config, stores, str(src), "pets")
    assert report.version.seq == 2
    assert (report.added, report.removed, report.modified) == (1, 1, 1)
    diff = {(e.kind, e.key) for e in catalog.diff("pets", 1, 2)}
    assert diff == {
        ("added", "train/bird/9.jpg"),
        ("removed", "train/dog/2.jpg"),
        ("modified", "train/cat/1.jpg"),
    }
    assert listing(catalog, "pets")["train/cat/1.jpg"].size == len(b"cat-1 but longer")


def test_same_size_rewrite_is_detected_by_etag(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", FILES)
    import_source(catalog, config, stores, str(src), "pets")
    path = src / "val/cat/3.jpg"
    path.write_bytes(b"CAT-3")  # same size, new content
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    report = import_source(catalog, config, stores, str(src), "pets")
    assert (report.added, report.removed, report.modified) == (0, 0, 1)


def test_labels_added_later_survive_a_reimport(tmp_path, config, catalog, stores):
    from datahub.catalog.model import Patch

    src = write_tree(tmp_path / "src", FILES)
    import_source(catalog, config, stores, str(src), "pets")
    catalog.commit("pets", [Patch("train/cat/1.jpg", labels={"class": "cat"})])
    assert import_source(catalog, config, stores, str(src), "pets").version is None
    (src / "train/cat/1.jpg").write_bytes(b"a new cat picture")
    report = import_source(catalog, config, stores, str(src), "pets")
    assert report.modified == 1
    assert dict(listing(catalog, "pets")["train/cat/1.jpg"].labels) == {"class": "cat"}


def test_copy_puts_content_addressed_deduplicated_blobs(tmp_path, config, catalog, stores):
    dups = {f"dup/{i:02d}.jpg": b"cat-1" for i in range(12)}  # copied concurrently: must upload once
    src = write_tree(tmp_path / "src", {**FILES, **dups, "dup/again.jpg": b"cat-1"})
    report = import_source(catalog, config, stores, str(src), "pets", copy=True)
    records = listing(catalog, "pets")
    first, dup = records["train/cat/1.jpg"], records["dup/again.jpg"]
    assert first.url == dup.url  # same bytes, one blob
    assert first.checksum.startswith("sha256:")
    assert first.url.startswith(config.resolved_objects_url)
    assert first.url.endswith(blob_key(first.checksum.removeprefix("sha256:")))
    assert report.copied_bytes == sum(len(v) for v in FILES.values())
    blobs = [p for p in (config.home_path / "objects").rglob("*") if p.is_file()]
    assert len(blobs) == 3
    # the copy no longer depends on the source
    (src / "train/cat/1.jpg").unlink()
    store, key = stores.for_url(first.url)
    assert store.read(key, etag=first.etag) == b"cat-1"
    # re-import: only the deleted source object changes
    report = import_source(catalog, config, stores, str(src), "pets", copy=True)
    assert (report.added, report.removed, report.modified, report.copied_bytes) == (0, 1, 0, 0)


def test_switching_copy_on_rewrites_records(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", FILES)
    import_source(catalog, config, stores, str(src), "pets")
    report = import_source(catalog, config, stores, str(src), "pets", copy=True)
    assert report.modified == 3
    assert import_source(catalog, config, stores, str(src), "pets", copy=True).version is None


def test_invalid_dataset_name_is_refused(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", FILES)
    with pytest.raises(InvalidName, match="invalid dataset name 'Pets!'"):
        import_source(catalog, config, stores, str(src), "Pets!")
    assert catalog.list_datasets() == []


def test_invalid_key_in_source_aborts_and_commits_nothing(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", FILES)
    import_source(catalog, config, stores, str(src), "pets")
    write_tree(src, {"train/bad\x01name.jpg": b"x", "zzz.jpg": b"z"})
    with pytest.raises(InvalidKey, match="control characters"):
        import_source(catalog, config, stores, str(src), "pets")
    assert [v.seq for v in catalog.log("pets")] == [1]


def test_source_changing_during_copy_aborts_with_nothing_committed(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", FILES)

    class RewriteOnSecond:
        """Rewrites the second object right after it was listed, before it is copied."""

        def __init__(self) -> None:
            self.seen = 0

        def update(self, n: int = 1, nbytes: int = 0) -> None:
            self.seen += n
            if self.seen == 2:
                (src / "train/dog/2.jpg").write_bytes(b"a different dog")

    with pytest.raises(ObjectChanged):
        import_source(catalog, config, stores, str(src), "pets", copy=True, progress=RewriteOnSecond())
    assert catalog.list_datasets() == []  # not even the dataset was created


def test_cancel_stops_the_import_before_any_commit(tmp_path, config, catalog, stores):
    src = write_tree(tmp_path / "src", FILES)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled, match="nothing was committed"):
        import_source(catalog, config, stores, str(src), "pets", cancel=cancel)
    assert catalog.list_datasets() == []


def test_missing_source_is_a_clear_error(tmp_path, config, catalog, stores):
    from datahub.errors import InvalidInput

    with pytest.raises(InvalidInput, match="does not exist"):
        import_source(catalog, config, stores, str(tmp_path / "nope"), "pets")


def test_memory_prefix_source(config, catalog, stores):
    from datahub.storage import drop_memory_space, open_store

    store = open_store("memory://ingest-mem", config)
    try:
        for key, data in FILES.items():
            store.put(f"data/{key}", data)
        store.put("other/x.jpg", b"not imported")
        import_source(catalog, config, stores, "memory://ingest-mem/data", "pets")
        records = listing(catalog, "pets")
        assert sorted(records) == sorted(FILES)
        assert records["val/cat/3.jpg"].url == "memory://ingest-mem/data/val/cat/3.jpg"
    finally:
        drop_memory_space("ingest-mem")


def test_a_commit_during_the_import_makes_it_fail_stale_with_nothing_written(
    tmp_path, config, catalog, stores
):
    from datahub.catalog.model import Delete
    from datahub.errors import StaleBase

    src = write_tree(tmp_path / "src", FILES)
    import_source(catalog, config, stores, str(src), "pets")
    (src / "val/cat/3.jpg").write_bytes(b"a new cat, longer")

    class CommitMidway:
        def update(self, n: int = 1, nbytes: int = 0) -> None:
            if catalog.store.head("pets") == 1:
                catalog.commit("pets", [Delete("train/dog/2.jpg")], message="someone else")

    with pytest.raises(StaleBase):
        import_source(catalog, config, stores, str(src), "pets", progress=CommitMidway())
    assert [v.message for v in catalog.log("pets")] == ["someone else", f"import {src}"]
