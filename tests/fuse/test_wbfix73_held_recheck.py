"""wbfix73, heldfix74: a new open of a file whose page file changed in place while another
handle holds it through passthrough (read-only ``--passthrough`` mount, a real mount).

The kernel takes no open of an inode with passthrough handles that does not name their
backing file (fs/fuse/iomode.c, ``fuse_file_io_open``: EIO to the caller), and it maps
every handle that names one from that file (fs/fuse/file.c, ``fuse_file_mmap``), direct
I/O or not. So a held file that fails its re-check is repaired in place through the
daemon's descriptor (``PassthroughOpens.recheck``): the version's bytes written back into
that very file before the new open is answered. wbfix73 answered the open with the held
file's backing id and direct I/O: its reads were right, its ``mmap`` (review74) and the
held handle's reads showed the damage.
"""

from __future__ import annotations

import errno
import mmap
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


def mapped(fd: int) -> bytes:
    """The handle's bytes through ``mmap`` (its length: the FUSE file's size, the version's)."""
    with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as m:
        return bytes(m)


@pytest.mark.parametrize("damage", ["hole", "append", "cut"])
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
            assert mapped(fd) == data  # the kernel maps the held file: repaired before this open
            assert os.pread(fd, len(data) + 100, 0) == data
            # it was the held file that was repaired: the handle held before the damage reads
            # the version again, and the held file's check failed (not a fresh file published)
            assert os.pread(held, len(data) + 100, 0) == data
            assert mapped(held) == data
            wait_until(lambda: sum(b["rejected"] for b in polled_stats(env)["backing_files"]) >= 1, GUARD)
            wait_until(lambda: sum(b["repaired"] for b in polled_stats(env)["backing_files"]) >= 1, GUARD)
            os.close(held)  # the new handle keeps the backing id the kernel holds for the inode
            held = -1
            assert os.pread(fd, len(data), 0) == data
        finally:
            for f in (held, fd):
                if f >= 0:
                    os.close(f)
        # every handle gone: a new open starts afresh, and still reads the version
        assert (root / key).read_bytes() == data


def test_a_held_file_that_cannot_be_restored_fails_a_new_open(env: FuseEnv, files: Dataset) -> None:
    """A hole punched in the held file and its header made another page's: the daemon does
    not write into a file that is not this page's, so nothing can restore it; the new open
    fails (EIO) rather than map it. Once every handle is closed, a new open reads the version."""
    mnt = env.mountpoint("w73lost")
    with env.mounted(mnt, "w73", "--passthrough"):
        root = mnt / "w73" / f"v{files.seq}"
        warm_into_disk(env, root)
        key, other = list(FILES)[1], list(FILES)[-2]
        data = FILES[key]
        held = os.open(root / key, os.O_RDONLY)
        try:
            wait_until(lambda: polled_mount(env).get("passthrough_handles_open", 0) >= 1, GUARD)
            path, other_path = page_file_of(env, data), page_file_of(env, FILES[other])
            DAMAGE["hole"](path, other_path)
            os.setxattr(path, "user.datahub.page", os.getxattr(other_path, "user.datahub.page"))
            with pytest.raises(OSError) as failed:
                os.close(os.open(root / key, os.O_RDONLY))
            assert failed.value.errno == errno.EIO
        finally:
            os.close(held)
        assert (root / key).read_bytes() == data
