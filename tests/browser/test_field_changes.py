"""The diff page's field-by-field changes: every changed field once, nothing else."""

from __future__ import annotations

from datahub.browser.diffs import Change, field_changes
from datahub.catalog import Record


def rec(**fields) -> Record:
    return Record("k", "s3://b/k", fields.pop("etag", "e"), 1, **fields)


def test_labels_given_to_a_record_without_any_are_listed_field_by_field_only():
    assert field_changes(rec(), rec(labels={"class": "cat"})) == (Change("labels.class", "", '"cat"'),)
    assert field_changes(rec(labels={"class": "cat"}), rec()) == (Change("labels.class", '"cat"', ""),)
    assert field_changes(rec(labels={"box": {}}), rec(labels={"box": {"x": 1}})) == (
        Change("labels.box.x", "", "1"),
    )


def test_an_emptied_or_removed_field_still_shows():
    assert field_changes(rec(labels={"box": {}}), rec()) == (Change("labels.box", "{}", ""),)
    assert field_changes(rec(labels={"box": 1}), rec(labels={"box": {}})) == (
        Change("labels.box", "1", "{}"),
    )
    assert field_changes(rec(meta={"s": "a"}, etag="1"), rec(meta={"s": "b"}, etag="2")) == (
        Change("etag", "1", "2"),
        Change("meta.s", '"a"', '"b"'),
    )
