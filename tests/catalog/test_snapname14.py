"""snapname14: a bucket URL's snapshot name is no other URL's (``datahub.catalog.snapshots``).

A bucket mount commits its listing only into the dataset named after its URL whose source is
that URL (``bucket_listing.foreign_snapshot``). When two URLs shared a name, a snapshot of one
made every mount of the other record nothing, and any token could make it through the remote
store (``s3.platform.team-b`` with source ``s3://platform/Team-B``). Plain URLs keep the
readable names existing snapshots have.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datahub.catalog.snapshots import names_snapshot_of, snapshot_dataset_name, snapshot_name
from datahub.errors import InvalidInput
from datahub.validation import check_name

VICTIM = "s3://platform/team-b"


def same_prefix(a: str, b: str) -> bool:
    """The mount's own rule for one prefix (``foreign_snapshot``): a trailing '/' changes nothing."""
    return a.rstrip("/") == b.rstrip("/")


def read_back(name: str) -> str:
    """The URL a name reads as: ``s3.b.p`` -> ``s3://b/p`` (``file.a`` -> ``file:///a``)."""
    scheme, _, path = name.partition(".")
    return f"{scheme}://{'/' if scheme == 'file' else ''}{path.replace('.', '/')}"


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("s3://bench", "s3.bench"),
        ("s3://bench/train/cats/", "s3.bench.train.cats"),
        ("s3://platform/team-b", "s3.platform.team-b"),
        ("s3://my_bucket/2026/run-7", "s3.my_bucket.2026.run-7"),
        ("memory://space/p", "memory.space.p"),
        ("rados://pool/x", "rados.pool.x"),
        ("file:///data/team-a/", "file.data.team-a"),
        ("s3://b/" + "x" * 58, "s3.b." + "x" * 58),  # 63 characters: still plain
    ],
)
def test_a_plain_url_keeps_the_name_its_snapshots_have(url: str, name: str) -> None:
    assert snapshot_dataset_name(url) == name


@pytest.mark.parametrize(
    "squat",
    [
        "s3://platform/Team-B",  # case
        "s3://platform.team-b",  # a dotted bucket
        "s3://platform/team b",  # an odd character
        "s3://platform/team%2Db",  # percent-encoded
        "s3://platform//team-b",  # an empty segment (another S3 prefix: keys may begin with '/')
        "S3://platform/team-b",  # the scheme as written (a mount lower-cases it first)
        "s3://Platform/team-b",
    ],
)
def test_no_other_url_takes_a_plain_urls_name(squat: str) -> None:
    name = snapshot_dataset_name(squat)
    assert name != snapshot_dataset_name(VICTIM) == "s3.platform.team-b"
    assert name.startswith("s3.") and "--" in name  # still reserved, still readable
    assert not names_snapshot_of("s3.platform.team-b", squat)


def test_a_hashed_name_is_stable() -> None:
    """Mounts find their snapshot by this name on every release: the one docs/fuse.md shows."""
    assert snapshot_dataset_name("s3://platform/Team-B/") == "s3.platform.team-b--71f2aa5e13c4a9054369"


def test_a_long_urls_name_cannot_be_read_back_into_a_plain_url() -> None:
    """Before, a long URL's name was its first 54 characters, '-' and 8 hex: read as a URL
    (dots to slashes), that name was a plain URL's own, made without a single hash run."""
    victim = "s3://platform/" + "x" * 70
    name = snapshot_dataset_name(victim)
    squat = read_back(name)
    assert squat != victim and snapshot_dataset_name(squat) != name
    assert re.fullmatch(r"s3\.platform\.x+--[0-9a-f]{20}", name) and len(name) <= 63
    assert snapshot_dataset_name(victim + "y") != name  # one character more: another hash


@pytest.mark.parametrize("url", ["ftp://b/p", "s3.b://p", "s3", "s3://", ""])
def test_a_url_of_no_storage_scheme_has_no_snapshot_name(url: str) -> None:
    with pytest.raises(InvalidInput):
        snapshot_dataset_name(url)
    assert not names_snapshot_of("s3.b.p", url)


SCHEMES = st.sampled_from(["s3", "S3", "memory", "Memory", "file", "rados"])
# bucket and path characters the old map folded together: case, '.', ' ', '%', '-', non-ASCII
SEGMENT = st.text(alphabet="abAB09._- %-é\u212a/", max_size=24)


@st.composite
def urls(draw: st.DrawFn) -> str:
    scheme = draw(SCHEMES)
    rest = "/".join(draw(st.lists(SEGMENT, min_size=1, max_size=6))) + draw(st.sampled_from(["", "/", "//"]))
    if scheme.lower() == "file":
        return f"{scheme}:///{rest}"
    return f"{scheme}://{draw(st.text(alphabet='abAB9.-_ ', min_size=1, max_size=12))}/{rest}"


def neighbours(url: str) -> list[str]:
    """URLs the old map gave the same name, and the URL the name reads as."""
    scheme, sep, rest = url.partition("://")
    folded = [
        rest.lower(),
        rest.replace(".", "/"),
        rest.replace("/", ".", 1),
        re.sub(r"[^a-z0-9._/-]", "-", rest.lower()),
        re.sub(r"/+", "/", rest),
        rest.replace("--", "-"),
        rest + "x",
    ]
    return [f"{s}{sep}{r}" for s in {scheme, scheme.lower()} for r in folded] + [
        read_back(snapshot_dataset_name(url))
    ]


@settings(max_examples=400, deadline=None)
@given(urls())
def test_two_different_urls_never_share_a_name(url: str) -> None:
    name = snapshot_dataset_name(url)
    assert check_name(name, "snapshot dataset") == name and snapshot_name(name)
    assert names_snapshot_of(name, url) and names_snapshot_of(name, url + "/")
    for other in neighbours(url):
        try:
            theirs = snapshot_dataset_name(other)
        except InvalidInput:
            continue
        assert (theirs == name) == same_prefix(other, url), (url, other, name)


@settings(max_examples=200, deadline=None)
@given(st.lists(urls(), min_size=2, max_size=20))
def test_names_of_many_urls_are_one_to_one(many: list[str]) -> None:
    names = [snapshot_dataset_name(u) for u in many]
    for a, name_a in zip(many, names, strict=True):
        for b, name_b in zip(many, names, strict=True):
            assert (name_a == name_b) == same_prefix(a, b), (a, b, name_a)
