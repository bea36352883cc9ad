"""wbfix73: a new open of a file whose page file changed in place while another handle
holds it through passthrough (read-only ``--passthrough`` mount, a real mount).

The kernel takes no open of an inode with passthrough handles that does not name their
backing file (fs/fuse/iomode.c, ``fuse_file_io_open``: EIO to the caller), and a held file
that fails its re-check must not be handed to a new open (promise 2). The new open is
answered with the held file's backing id and direct I/O, so its reads come to the daemon,
which serves the version's bytes (``PassthroughOpens.open``).
"""

from __future__ import annotations

import os

import pytest

from tests.fuse.conftest import Dataset, FuseEnv, polled_mount, polled_stats, upload_dataset, wait_until
from tests.fuse.test_integrity15 import DAMAGE
from tests.fuse.test_passthrough import FILES, GUARD, page_file_of, warm_into_disk

pytestmark = pytest.mark.fuse


@pytest.fixture
def files(env: FuseEnv) -> Dataset:
    from fuse_adapter import fuse_ops

    if not fuse_ops.PASSTHROUGH:
        pytest.skip("pyfuse3 built without libfuse >= 3.16")
    return upload_dataset(env, "w73", FILES)


@pytest.mark.parametrize("damage", ["hole", "append"])
def test_a_new_open_beside_a_held_passthrough_handle_of_a_changed_file_reads_the_version(
    env: FuseEnv, files: Dataset, damage: str
) -> None:
    mnt = env.mountpoint("w73held")
    with env.mounted(mnt, "w73", "--passthrough"):
        root = mnt / "w73" / f"v{files.seq}"
        warm_into_disk(env, root)
        key, other = list(FILES)[0], list(FILES)[-1]
        data = FILES[key]
        held = os.open(root / key, os.O_RDONLY)  # verified and handed to the kernel
        fd = -1
        try:
            wait_until(lambda: polled_mount(env).get("passthrough_handles_open", 0) >= 1, GUARD)
            DAMAGE[damage](page_file_of(env, data), page_file_of(env, FILES[other]))
            fd = os.open(root / key, os.O_RDONLY)  # the held file fails its re-check
            assert os.pread(fd, len(data) + 100, 0) == data
            # it was the held file's check that failed (not a fresh file published)
            wait_until(lambda: sum(b["rejected"] for b in polled_stats(env)["backing_files"]) >= 1, GUARD)
            os.close(held)  # the new handle keeps the backing id the kernel holds for the inode
            held = -1
            assert os.pread(fd, len(data), 0) == data
        finally:
            for f in (held, fd):
                if f >= 0:
                    os.close(f)
        # every handle gone: a new open starts afresh, and still reads the version
        assert (root / key).read_bytes() == data
