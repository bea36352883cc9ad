"""Keys no version may hold are refused at the door, naming the key, with nothing written.

Issue 12 item 9: a path segment over 255 bytes (NAME_MAX) was accepted and shown by a mount
but could not be copied to a local file system, and ``.datahub-hint-`` names (never entries,
docs/semantics.md) were imported and committed, then gave ENOENT in the version.
"""

from __future__ import annotations

import json

import pytest

from datahub.catalog.model import Put, Record
from datahub.errors import InvalidInput, InvalidKey
from datahub.ingest import import_source
from datahub.storage import drop_memory_space, open_store
from datahub.validation import NAME_MAX, check_new_key

LONG = "d/" + "x" * (NAME_MAX + 1) + ".jpg"
BAD_KEYS = [LONG, ".datahub-hint-x", "a/.datahub-hint-1-0-1-5/b.jpg"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_check_new_key_refuses_and_names_the_key(key: str) -> None:
    with pytest.raises(InvalidKey) as exc:
        check_new_key(key)
    assert key[:60] in exc.value.message


def test_a_segment_of_exactly_name_max_bytes_is_fine() -> None:
    assert check_new_key("d/" + "é" * (NAME_MAX // 2) + "x")  # 255 bytes of UTF-8
    assert check_new_key("a/datahub-hint-x/.datahub-hintx")  # only the exact prefix is reserved


@pytest.mark.parametrize("key", BAD_KEYS)
def test_import_refuses_and_writes_nothing(key: str, config, catalog, stores) -> None:
    name = "import-keys"
    drop_memory_space(name)
    store = open_store(f"memory://{name}", config)
    store.put("ok.jpg", b"fine")
    store.put(key, b"refused")
    with pytest.raises(InvalidKey) as exc:
        import_source(catalog, config, stores, f"memory://{name}", "ds")
    assert key[:60] in exc.value.message
    assert not [v for d in catalog.list_datasets() if d.name == "ds" for v in catalog.log("ds")]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_manifest_import_refuses(key: str, tmp_path, config, catalog, stores) -> None:
    name = "manifest-keys"
    drop_memory_space(name)
    store = open_store(f"memory://{name}", config)
    store.put("ok.jpg", b"fine")
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"url": f"memory://{name}/ok.jpg", "key": key}) + "\n")
    with pytest.raises(InvalidInput) as exc:
        import_source(catalog, config, stores, str(manifest), "ds")
    assert key[:60] in exc.value.message


@pytest.mark.parametrize("key", BAD_KEYS)
def test_commit_refuses_and_writes_nothing(key: str, catalog) -> None:
    catalog.create_dataset("ds")
    with pytest.raises(InvalidKey) as exc:
        catalog.commit("ds", [Put(Record(key, "s3://b/k", "e", 1))], message="m")
    assert key[:60] in exc.value.message
    assert list(catalog.log("ds")) == []


@pytest.mark.parametrize("url", ["file:///data/q?x=1", "file:///data/h#f", "memory://m/k#f", "s3://b/dir/"])
def test_commit_refuses_urls_that_name_no_readable_object(url: str, catalog) -> None:
    catalog.create_dataset("ds")
    with pytest.raises(InvalidInput, match="unreadable object url"):
        catalog.commit("ds", [Put(Record("k", url, "e", 1))], message="m")


def test_commit_takes_escaped_and_old_raw_s3_urls(catalog) -> None:
    """Old raw ``s3://b/q?x=1`` URLs (and so derives of old versions) stay committable."""
    catalog.create_dataset("ds")
    changes = [Put(Record("a", "s3://b/q?x=1", "e", 1)), Put(Record("b", "s3://b/q%3Fx=1", "e", 1))]
    assert catalog.commit("ds", changes, message="m").seq == 1


def test_manifest_keys_are_decoded_from_escaped_urls(tmp_path, config, catalog, stores) -> None:
    """A bare-URL manifest line names its key by the URL: escapes are undone (docs/storage.md)."""
    name = "manifest-escaped"
    drop_memory_space(name)
    store = open_store(f"memory://{name}", config)
    objects = {"d/q?x=1": b"q", "d/hash#frag": b"h", "d/pct%41": b"p"}
    for key, data in objects.items():
        store.put(key, data)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(store.url_for(k) + "\n" for k in objects))
    import_source(catalog, config, stores, str(manifest), "ds")
    records = {r.key: r for r in catalog.list_records("ds")}
    assert sorted(records) == ["hash#frag", "pct%41", "q?x=1"]
    for record in records.values():
        got_store, key = stores.for_url(record.url)
        assert got_store.read(key, etag=record.etag) == objects["d/" + record.key]
