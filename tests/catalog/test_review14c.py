"""review14c: snapshot names (snapname14) at their edges: 63 characters, escapes, unicode forms."""

from __future__ import annotations

import unicodedata

import pytest

from datahub.catalog.snapshots import HASHED, MAX_NAME, names_snapshot_of, snapshot_dataset_name
from datahub.validation import check_name


def test_a_plain_url_keeps_its_readable_name_up_to_exactly_63_characters() -> None:
    fits = "s3://b/" + "a" * (MAX_NAME - len("s3.b."))
    assert snapshot_dataset_name(fits) == "s3.b." + "a" * (MAX_NAME - len("s3.b."))
    over = fits + "a"
    name = snapshot_dataset_name(over)
    assert HASHED in name and len(name) == MAX_NAME and check_name(name) == name
    assert name != snapshot_dataset_name(over + "a")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("s3://b/x/y", "s3://b/x%2Fy"),  # the same key once decoded, another URL: another snapshot
        ("s3://b/p", "s3://b//p"),
        ("s3://b/p", "s3://b/p."),
        ("s3://b/p", "s3://b/p/."),
        ("s3://b/p", "S3://b/p"),
        ("s3://b/" + unicodedata.normalize("NFC", "é"), "s3://b/" + unicodedata.normalize("NFD", "é")),
        ("s3://b/" + "-" * 70, "s3://b/" + "-" * 69 + "."),  # a hashed name's prefix of dashes
        ("s3://b/a--b", "s3://b/a-/-b"),
    ],
)
def test_urls_that_differ_name_different_snapshots(a: str, b: str) -> None:
    na, nb = snapshot_dataset_name(a), snapshot_dataset_name(b)
    assert na != nb and check_name(na) == na and check_name(nb) == nb
    assert names_snapshot_of(na, a) and not names_snapshot_of(na, b)


def test_a_trailing_slash_names_the_same_prefix() -> None:
    assert snapshot_dataset_name("s3://b/p/") == snapshot_dataset_name("s3://b/p")
    assert snapshot_dataset_name("s3://b/P/") == snapshot_dataset_name("s3://b/P")
