"""review17d's attacks on lease17: the mount's ``--author``, kept in its record for the recovery.

An author the catalog refuses (a lone surrogate: what Python makes of argv bytes that are not
UTF-8, such as a Latin-1 ``Jos\\xe9``) was taken by ``datahub mount --workspace W --commit-to D
--author NAME``, which then served writes for as long as it ran; its commit at unmount was
refused (InvalidInput), and so was every recovery by ``datahub umount``, which commits as the
record's author (lease17). The mount refuses it now, before it mounts anything.
"""

from __future__ import annotations

import pytest

from datahub.catalog import open_catalog
from fuse_adapter.daemon import is_mounted, read_record
from tests.fuse.conftest import FuseEnv
from tests.writeback.test_lease17 import env  # noqa: F401 - the fixture: a mount's home on a fresh bucket

NOT_UTF8 = "Jos\udce9"  # argv b"Jos\xe9" (Latin-1), as Python decodes it


@pytest.mark.fuse
def test_a_mount_whose_author_the_catalog_would_refuse_is_refused_before_it_mounts(
    env: FuseEnv,  # noqa: F811 - the fixture imported above
) -> None:
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("out17d")
    finally:
        catalog.close()
    mnt = env.mountpoint("author17d")
    args = ("mount", str(mnt), "--workspace", "ws17d", "--commit-to", "out17d", "--author", NOT_UTF8)
    try:
        refused = env.cli(*args, "--background", check=False)
        assert not is_mounted(str(mnt)), "mounted: its commit at unmount would be refused"
        assert refused.returncode == 2, refused.stderr  # InvalidInput's exit code
        assert "--author" in refused.stderr and "surrogate" in refused.stderr, refused.stderr
        assert read_record(env.config.home_path, str(mnt)) is None
    finally:
        env.teardown(mnt, None)
