"""JSON-lines manifests: URL lines and object lines, key rules, and errors naming the line."""

from __future__ import annotations

import json

import pytest

from datahub.errors import InvalidKey, ManifestError, ObjectNotFound
from datahub.ingest import import_source
from datahub.ingest.items import SourceItem
from datahub.ingest.manifest import common_directory
from datahub.ingest.sorting import sorted_items
from tests.ingest.conftest import write_tree


@pytest.fixture
def images(tmp_path):
    return write_tree(
        tmp_path / "data",
        {"train/cat/1.jpg": b"c1", "train/dog/2.jpg": b"d2", "val/cat/3.jpg": b"c3", "a b/sp ace.jpg": b"s"},
    )


def write_manifest(path, lines):
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return str(path)


def test_bare_urls_get_keys_relative_to_their_common_directory(tmp_path, images, config, catalog, stores):
    m = write_manifest(
        tmp_path / "m.jsonl",
        [(images / "train/dog/2.jpg").as_uri(), "", (images / "train/cat/1.jpg").as_uri()],
    )
    import_source(catalog, config, stores, m, "pets")
    assert [r.key for r in catalog.list_records("pets")] == ["cat/1.jpg", "dog/2.jpg"]


def test_percent_encoded_file_urls_give_plain_keys(tmp_path, images, config, catalog, stores):
    m = write_manifest(
        tmp_path / "m.jsonl", [(images / "a b/sp ace.jpg").as_uri(), (images / "val/cat/3.jpg").as_uri()]
    )
    import_source(catalog, config, stores, m, "pets")
    assert [r.key for r in catalog.list_records("pets")] == ["a b/sp ace.jpg", "val/cat/3.jpg"]


def test_object_lines_carry_keys_labels_and_meta(tmp_path, images, config, catalog, stores):
    m = write_manifest(
        tmp_path / "m.jsonl",
        [
            {"url": (images / "train/cat/1.jpg").as_uri(), "key": "x/cat.jpg", "labels": {"class": "cat"}},
            {"url": (images / "train/dog/2.jpg").as_uri(), "key": "x/dog.jpg", "meta": {"split": "train"}},
        ],
    )
    import_source(catalog, config, stores, m, "pets")
    cat = catalog.get_record("pets", "latest", "x/cat.jpg")
    dog = catalog.get_record("pets", "latest", "x/dog.jpg")
    assert dict(cat.labels) == {"class": "cat"} and dict(dog.meta) == {"split": "train"}
    assert [r.key for r in catalog.list_records("pets", where="labels.class=cat")] == ["x/cat.jpg"]
    # changing only a label is a modification
    m = write_manifest(
        tmp_path / "m.jsonl",
        [
            {"url": (images / "train/cat/1.jpg").as_uri(), "key": "x/cat.jpg", "labels": {"class": "lion"}},
            {"url": (images / "train/dog/2.jpg").as_uri(), "key": "x/dog.jpg", "meta": {"split": "train"}},
        ],
    )
    report = import_source(catalog, config, stores, m, "pets")
    assert (report.added, report.removed, report.modified) == (0, 0, 1)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ('{"url": "file:///x", ', "not valid JSON"),
        ("[1, 2]", "expected a URL or a JSON object"),
        ('{"key": "a.jpg"}', "missing 'url'"),
        ('{"url": "file:///x.jpg", "lables": {}}', "unknown field"),
        ('{"url": "file:///x.jpg", "labels": [1]}', "'labels' must be a JSON object"),
        ("ftp://host/x.jpg", "unsupported scheme"),
        ("s3://bucket-only", "must name an object"),
        ('{"url": "file:///x.jpg", "key": "../etc/passwd"}', "'..' path segments"),
        ('{"url": "file:///x.jpg", "key": "/abs"}', "must be relative"),
        ('{"url": "file:///x.jpg", "key": "nul\\u0000"}', "control characters"),
    ],
)
def test_one_malformed_line_names_the_line_and_commits_nothing(
    tmp_path, images, config, catalog, stores, bad, why
):
    good = [(images / "train/cat/1.jpg").as_uri(), (images / "train/dog/2.jpg").as_uri()]
    m = write_manifest(tmp_path / "m.jsonl", [good[0], good[1], bad])
    with pytest.raises(ManifestError, match=f"line 3: .*{why}") as info:
        import_source(catalog, config, stores, m, "pets")
    assert info.value.details["line"] == 3
    assert catalog.list_datasets() == []


def test_overlong_key_is_refused_with_its_line(tmp_path, images, config, catalog, stores):
    m = write_manifest(
        tmp_path / "m.jsonl", [{"url": (images / "train/cat/1.jpg").as_uri(), "key": "k" * 1025}]
    )
    with pytest.raises(ManifestError, match="line 1: .*longer than 1024 bytes"):
        import_source(catalog, config, stores, m, "pets")


def test_missing_object_names_the_line(tmp_path, images, config, catalog, stores):
    m = write_manifest(
        tmp_path / "m.jsonl", [(images / "train/cat/1.jpg").as_uri(), (images / "gone.jpg").as_uri()]
    )
    with pytest.raises(ObjectNotFound, match="line 2"):
        import_source(catalog, config, stores, m, "pets")
    assert catalog.list_datasets() == []


def test_duplicate_keys_name_both_lines(tmp_path, images, config, catalog, stores):
    url = (images / "train/cat/1.jpg").as_uri()
    m = write_manifest(
        tmp_path / "m.jsonl", [{"url": url, "key": "k.jpg"}, url, {"url": url, "key": "k.jpg"}]
    )
    with pytest.raises(ManifestError, match="duplicate key 'k.jpg' in lines 1 and 3"):
        import_source(catalog, config, stores, m, "pets")
    assert catalog.list_datasets() == []


def test_urls_from_different_buckets_need_explicit_keys(tmp_path):
    m = write_manifest(tmp_path / "m.jsonl", ["s3://one/a/x.jpg", "s3://two/a/y.jpg"])
    with pytest.raises(ManifestError, match="line 2: .*explicit 'key'"):
        common_directory(m)


def test_common_directory_stops_at_a_path_segment(tmp_path):
    m = write_manifest(tmp_path / "m.jsonl", ["s3://b/train/cats/1.jpg", "s3://b/train/cars/2.jpg"])
    assert common_directory(m) == "s3://b/train/"
    m = write_manifest(tmp_path / "m.jsonl", ["s3://b/x.jpg", "s3://b/train/2.jpg"])
    assert common_directory(m) == "s3://b/"


def test_non_utf8_manifest_names_the_line(tmp_path, config, catalog, stores):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"file:///a.jpg\n\xff\xfe\n")
    with pytest.raises(ManifestError, match="line 2: not valid UTF-8"):
        import_source(catalog, config, stores, str(path), "pets")


def test_invalid_key_from_url_names_the_line(tmp_path, images, config, catalog, stores):
    ok = (images / "train/cat/1.jpg").as_uri()
    m = write_manifest(tmp_path / "m.jsonl", [ok, ok.replace("/cat/", "/cat//")])
    with pytest.raises(InvalidKey, match="line 2"):
        import_source(catalog, config, stores, m, "pets")


def test_external_sort_merges_runs_in_key_order_with_a_tiny_budget(tmp_path):
    keys = [f"k{(i * 7919) % 1000:04d}" for i in range(1000)]
    items = (SourceItem(k, f"file:///{k}", "e", 1, line=n) for n, k in enumerate(keys, 1))
    out = list(sorted_items(items, budget_bytes=2000, tmp_dir=str(tmp_path)))
    assert [i.key for i in out] == sorted(keys)
    assert list(tmp_path.iterdir()) == []  # run files are removed
