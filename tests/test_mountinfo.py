"""datahub.mountinfo: the one reader of the kernel's mount table."""

from __future__ import annotations

import os

from datahub import mountinfo


def test_a_line_with_optional_fields_and_escaped_paths_parses_whole():
    line = (
        "312 29 0:71 /sub\\040dir /mnt/a\\011b\\134c\\040d rw,nosuid shared:1 master:2 - "
        "fuse.datahub datahub:ds@v1 rw,user_id=0\n"
    )
    entry = mountinfo.parse_line(line)
    assert entry == mountinfo.MountEntry(
        point="/mnt/a\tb\\c d", root="/sub dir", device="0:71", fstype="fuse.datahub", source="datahub:ds@v1"
    )
    assert entry.datahub and entry.fuse
    assert "a bind of its directory /sub dir" in entry.described()


def test_the_last_mount_at_a_point_is_the_visible_one():
    base = "1 0 8:1 / /data rw - ext4 /dev/vda rw\n"
    over = "2 1 0:50 / /data rw - fuse.sshfs me@host:/x rw\n"
    entries = [mountinfo.parse_line(base), mountinfo.parse_line(over)]
    assert mountinfo.top_mount("/data", entries).fstype == "fuse.sshfs"
    assert mountinfo.top_mount("/elsewhere", entries) is None


def test_the_root_of_this_namespace_is_in_the_live_table():
    root = mountinfo.top_mount("/")
    assert root is not None and root.point == "/"
    assert os.path.exists(mountinfo.MOUNTINFO)
