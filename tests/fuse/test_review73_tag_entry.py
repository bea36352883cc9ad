"""review73: a tag whose name is ``v`` before a version (``vv3``) was laid out as that version.

A version mount shows ``MOUNT/<dataset>/v<seq>/`` and a symlink named after each other ref
(``golden -> v7``). Where a spec's files are (``VersionSpec.entry``) took the ref's leading
``v``s off with ``lstrip("v")``: the tag ``vv3`` (a valid tag: ``v3`` is version-like, ``vv3``
is not) was taken for version 3, the mount made no ``vv3`` symlink, and ``--background`` said
the files were at ``MOUNT/<dataset>/v3``, a directory of no version mounted (or of another
one, mounted beside it). A number with leading zeros (``v01``) named its version, but the
path shown was ``MOUNT/<dataset>/v01``, where the mount has ``v1``."""

from __future__ import annotations

import os

import pytest

from datahub.catalog import open_catalog
from tests.fuse.conftest import FuseEnv, upload_dataset

pytestmark = pytest.mark.fuse


def test_a_tag_named_v_and_digits_is_a_symlink_and_a_number_its_directory(env: FuseEnv) -> None:
    data = upload_dataset(env, "tagged", {"a.txt": b"the tagged version"})
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.tag("tagged", "vv3", data.seq)
    finally:
        catalog.close()
    mnt = env.mountpoint("tagged")
    shown = env.cli("mount", "--json", "--background", str(mnt), "tagged@vv3", "tagged@v01")
    try:
        assert f'"tagged@vv3": "{mnt}/tagged/vv3"' in shown.stdout, shown.stdout
        assert f'"tagged@v01": "{mnt}/tagged/v{data.seq}"' in shown.stdout, shown.stdout
        assert os.readlink(mnt / "tagged" / "vv3") == f"v{data.seq}"
        assert (mnt / "tagged" / "vv3" / "a.txt").read_bytes() == b"the tagged version"
        assert sorted(os.listdir(mnt / "tagged")) == [f"v{data.seq}", "vv3"]
    finally:
        env.umount(mnt)
