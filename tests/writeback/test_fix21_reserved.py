"""fix21: a pack member reserved and never written is given up whole (``Packs.abandon``).

A small chunk's key reserves its place in a pack (``Packs.reserve``), which counts as an append
in flight until ``write`` ends it (so that a ``delete`` racing the append leaves the unlink to
it: test_packs). A commit that reserved keys for several chunks and then failed before any
write began (the next reservation found no descriptor for a new pack, or ``submit_commit``
raised) never gave the earlier keys up: the pack's descriptor stayed open, and the pack linked
when it had no other member, until the next open's recovery (packs38's finding).
"""

from __future__ import annotations

import errno
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from datahub.errors import DatahubError
from datahub.writeback.packs import Packs
from tests.writeback.conftest import CHUNK, make_env, write

PREFIX = "writeback/ws/j-1"


def _links() -> list[str]:
    """What each of this process's descriptors is open on."""
    links = []
    for name in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            pass  # the listing's own descriptor, closed meanwhile
    return links


def _open_on(path: Path) -> int:
    """How many of this process's descriptors are open on ``path``."""
    return _links().count(str(path))


def test_a_member_abandoned_unwritten_closes_and_unlinks_its_pack(tmp_path: Path) -> None:
    packs = Packs(tmp_path, PREFIX, 1 << 20)
    key = packs.reserve(1, 0, 10)
    path, _ = packs.path_of(key)
    assert path.exists() and _open_on(path) == 1
    packs.abandon(key)
    assert not path.exists(), "the pack of no live member stayed linked"
    assert _open_on(path) == 0, "the pack's descriptor stayed open"
    packs.close()


def test_an_abandoned_member_leaves_the_others_written_and_the_pack_usable(tmp_path: Path) -> None:
    packs = Packs(tmp_path, PREFIX, 1 << 20)
    kept, dropped = packs.reserve(1, 0, 10), packs.reserve(2, 0, 10)
    packs.write(kept, b"0123456789")
    packs.abandon(dropped)
    path, offset = packs.path_of(kept)
    with open(path, "rb") as fh:
        fh.seek(offset)
        assert fh.read(10) == b"0123456789"
    later = packs.reserve(3, 0, 4)  # the pack is still current: appended to, then closed at the end
    packs.write(later, b"abcd")
    packs.delete(kept)
    packs.delete(later)
    assert not path.exists() and _open_on(path) == 0
    packs.close()


@contextmanager
def _no_new_descriptor(but: int = 0) -> Iterator[None]:
    """Every ``open`` but the first ``but`` fails with EMFILE (the soft limit set that far
    past the lowest free descriptor)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.open("/dev/null", os.O_RDONLY)
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest + but, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_pack_whose_directory_cannot_be_synced_is_not_left_behind(tmp_path: Path) -> None:
    """The pack file opens, its directory's descriptor does not: the reservation fails and
    neither the new pack nor its descriptor stays (before: both, unnamed, until recovery)."""
    packs = Packs(tmp_path, PREFIX, 1 << 20)
    (tmp_path / PREFIX / "packs").mkdir(parents=True)
    with _no_new_descriptor(but=1), pytest.raises(OSError) as failed:
        packs.reserve(1, 0, 10)
    assert failed.value.errno == errno.EMFILE
    assert os.listdir(tmp_path / PREFIX / "packs") == []
    # this test's own directory: another test's workspace of one name may be open in this process
    stayed = [link for link in _links() if link.startswith(str(tmp_path / PREFIX))]
    assert stayed == [], "the new pack's descriptor stayed open"
    key = packs.reserve(1, 0, 10)  # with descriptors again: a pack as ever
    packs.write(key, b"0123456789")
    packs.close()


@pytest.mark.parametrize("staged", [False, True], ids=["buffered", "staged"])
def test_a_commit_whose_second_reservation_fails_gives_the_first_up(tmp_path: Path, staged: bool) -> None:
    """Through a workspace: a file of two small chunks whose first key fits the current pack
    and whose second needs a new one, with no descriptor left to create it. The fsync fails;
    the first key is given up: the current pack (sealed by the second reservation) closes,
    holding only the member it had. ``staged``: the file's bytes in a staged file
    (``StagedFile._commit_copied``), else in buffers (``OpenFile._commit_overlapped``)."""
    env = make_env(tmp_path, writeback_pack_bytes=CHUNK + CHUNK // 2)
    try:
        ws = env.open()
        write(ws, "first.bin", b"f" * 100)  # makes the current pack, with room for one chunk more
        (pack,) = (tmp_path / "var").rglob("packs/*")
        assert _open_on(pack) == 1
        # neither chunk full (a full one would be uploaded at once, write-behind): byte
        # CHUNK - 1 is a hole
        data = bytearray(os.urandom(2 * CHUNK - 100))
        data[CHUNK - 1] = 0
        fh = ws.open("two.bin", create=True, truncate=True, staged=staged)
        assert (fh.staged_fd >= 0) == staged
        assert fh.write(0, data[: CHUNK - 1]) == CHUNK - 1
        assert fh.write(CHUNK, data[CHUNK:]) == len(data) - CHUNK
        with _no_new_descriptor(), pytest.raises(DatahubError) as failed:
            fh.fsync()
        assert "Too many open files" in str(failed.value) or "descriptor" in str(failed.value)
        assert _open_on(pack) == 0, "the first chunk's reservation was never given up"
        assert sorted((tmp_path / "var").rglob("packs/*")) == [pack]  # no second pack was made
        fh.fsync()  # with descriptors again, the same file commits
        fh.close()
        assert ws.open("two.bin").read(0, len(data)) == data
        assert ws.open("first.bin").read(0, 100) == b"f" * 100
    finally:
        env.close()
