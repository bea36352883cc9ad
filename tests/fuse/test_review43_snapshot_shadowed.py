"""review43: a bucket snapshot records every key of the bucket, a file shadowed by a directory of
its name (``a`` beside ``a/b``) too, whichever way the mount listed the bucket.

A bucket may hold ``a`` and ``a/b``; a mount shows the directory and hides the file (counted as
``shadowed``, docs/semantics.md), and a version may hold both keys (docs/catalog.md, "Limits").
The snapshot is "exactly the listing" (docs/fuse.md, "Bucket snapshots"). Before, a bucket listed
whole (at most ``cache.bucket_list_whole_objects`` keys) committed the files its tree *shows*
(``ListingTree.walk_files`` walked ``readdir``), so the snapshot lost ``a``, while a larger bucket,
listed by directory, committed its listing with ``a``: the same bucket's snapshot lost and regained
objects by the bucket's size alone, and a ``diff`` of two snapshots showed objects deleted that
nobody deleted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from datahub.catalog import open_catalog
from datahub.catalog.model import Record
from fuse_adapter.bucket_listing import _count_shadowed
from fuse_adapter.layout import snapshot_dataset_name
from fuse_adapter.mount_info import MountInfo
from fuse_adapter.tree import ROOT_INODE
from tests.fuse.conftest import FuseEnv, wait_until
from tests.fuse.test_tree import _load

#: ``a`` and ``e`` are shadowed by directories of their names; ``e-x`` sorts between ``e`` and ``e/``
KEYS = ["a", "a/b", "c", "d/e", "e", "e-x", "e/f/g", "z"]


def _info(mnt: Path) -> dict:
    return json.loads((mnt / ".datahub").read_text())


@pytest.mark.fuse
@pytest.mark.parametrize("listing", ["whole", "by-directory"])
def test_a_bucket_snapshot_records_files_shadowed_by_a_directory(env: FuseEnv, listing: str) -> None:
    settings_ = "bucket_warmup_opens = 2\n" + (
        "bucket_list_whole_objects = 3\n" if listing == "by-directory" else ""
    )
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write(settings_)
    client = env.endpoint.client()
    etags = {}
    for key in KEYS:
        etags[key] = client.put_object(Bucket=env.bucket, Key=f"p/{key}", Body=key.encode() * 7)["ETag"]
    url = f"s3://{env.bucket}/p"
    mnt = env.mountpoint("bucket")
    with env.mounted(mnt, url):  # the automatic warm-up: a large bucket's opens take the snapshot
        for key in ("c", "d/e", "z", "a/b", "e/f/g"):
            assert (mnt / key).read_bytes() == key.encode() * 7
        assert (mnt / "a").is_dir() and (mnt / "e").is_dir()  # the mount hides the files
        wait_until(lambda: _info(mnt)["versions"], 30)
        info = _info(mnt)
        assert info["listing"] == listing and info["snapshot"] == "committed", info
        # .datahub counts what the mount shows, either way (listed by directory, it counted
        # every record of the snapshot as a file and no shadowed key)
        shown = [k for k in KEYS if k not in ("a", "e")]
        assert (info["files"], info["bytes"], info["shadowed"]) == (
            len(shown),
            sum(7 * len(k) for k in shown),
            2,
        ), info
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        records = list(catalog.list_records(snapshot_dataset_name(url), 1))
    finally:
        catalog.close()
    assert [r.key for r in records] == KEYS, f"{listing}: the snapshot is not the bucket's listing"
    assert {r.key: (r.size, r.etag.strip('"')) for r in records} == {
        k: (7 * len(k), etags[k].strip('"')) for k in KEYS
    }


@settings(max_examples=60, deadline=None)
@given(
    st.sets(
        st.lists(st.sampled_from(["a", "b", "a.b", "a-", "ab", "0", "é"]), min_size=1, max_size=4).map(tuple)
    )
)
def test_walking_shadowed_files_gives_every_key_in_key_order(paths: set[tuple[str, ...]]) -> None:
    """What the snapshot's merge with the head needs: every key, in the listing's order."""
    keys = {"/".join(p) for p in paths}
    tree, _feed = _load(list(keys))
    walked = [k for k, _ref, _m in tree.walk_files(ROOT_INODE, shadowed=True)]
    assert walked == sorted(keys, key=lambda k: k.encode())
    shown = [k for k, _ref, _m in tree.walk_files(ROOT_INODE)]
    dirs = {k[:i] for k in keys for i in range(len(k)) if k[i] == "/"}
    assert shown == sorted(keys - dirs, key=lambda k: k.encode())


@settings(max_examples=60, deadline=None)
@given(
    st.sets(
        st.lists(st.sampled_from(["a", "b", "a.b", "a-", "ab", "0", "é"]), min_size=1, max_size=4).map(tuple)
    )
)
def test_a_snapshot_listing_counts_shadowed_files_as_the_tree_does(paths: set[tuple[str, ...]]) -> None:
    """The by-directory snapshot's counts, streamed, equal the whole listing's tree's."""
    keys = sorted({"/".join(p) for p in paths}, key=lambda k: k.encode())
    _tree, feed = _load(keys)
    counted = MountInfo(source="memory://b")
    records = [Record(k, f"memory://b/{k}", "e", len(k)) for k in keys]
    assert list(_count_shadowed(iter(records), counted)) == records
    assert counted.shadowed == feed.shadowed
    assert sum(len(k) for k in keys) - counted.bytes == feed.bytes
