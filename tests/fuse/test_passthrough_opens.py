"""The bookkeeping of passthrough opens (fuse_adapter.passthrough), without a mount: one
backing id per inode while it has passthrough handles, never mixed with ordinary handles,
bounded, always released, and a mount-wide refusal turns passthrough off once."""

from __future__ import annotations

import errno
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from fuse_adapter.passthrough import PassthroughOpens


class FakeKernel:
    def __init__(self, refuse: int | None = None) -> None:
        self.next_id = 1
        self.open_ids: set[int] = set()
        self.refuse = refuse

    def open_id(self, fd: int) -> int:
        if self.refuse is not None:
            raise OSError(self.refuse, os.strerror(self.refuse))
        os.fstat(fd)  # a real, open descriptor
        self.next_id += 1
        self.open_ids.add(self.next_id)
        return self.next_id

    def close_id(self, backing_id: int) -> None:
        self.open_ids.remove(backing_id)


def a_fd() -> int:
    return os.open("/dev/null", os.O_RDONLY)


def test_one_backing_id_per_inode_released_with_its_last_handle() -> None:
    k = FakeKernel()
    pt = PassthroughOpens(k.open_id, k.close_id, wanted=True)
    bid = pt.register(5, a_fd())
    pt.opened(1, 5, bid)
    assert pt.existing(5) == bid  # a second open of the inode must use the same id
    pt.opened(2, 5, pt.existing(5))
    assert len(k.open_ids) == 1
    pt.released(1)
    assert k.open_ids == {bid}
    pt.released(2)
    assert k.open_ids == set() and pt.existing(5) is None


def test_an_inode_with_ordinary_handles_is_not_passthrough() -> None:
    k = FakeKernel()
    pt = PassthroughOpens(k.open_id, k.close_id, wanted=True)
    pt.opened(1, 7, None)
    assert not pt.may_try(7)
    assert pt.register(7, a_fd()) is None and not k.open_ids
    pt.released(1)
    assert pt.may_try(7)


def test_a_mount_wide_refusal_turns_passthrough_off_once() -> None:
    k = FakeKernel(refuse=errno.EPERM)
    pt = PassthroughOpens(k.open_id, k.close_id, wanted=True)
    assert pt.register(3, a_fd()) is None
    assert not pt.active and pt.mode.startswith("off: backing file refused")
    assert not pt.may_try(4)


def test_backing_ids_are_bounded() -> None:
    k = FakeKernel()
    pt = PassthroughOpens(k.open_id, k.close_id, wanted=True, max_ids=2)
    for fh, ino in enumerate((1, 2, 3)):
        bid = pt.register(ino, a_fd()) if pt.may_try(ino) else None
        pt.opened(fh, ino, bid)
    assert len(k.open_ids) == 2 and pt.stats()["ordinary_opens"] == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.booleans()), max_size=60))
def test_ids_match_open_handles_whatever_the_order(ops: list[tuple[bool, int, bool]]) -> None:
    """Any interleaving of opens (with or without a backing file) and releases: an inode
    never has both kinds of handles, and the ids held are exactly the inodes with
    passthrough handles; all are released at the end."""
    k = FakeKernel()
    pt = PassthroughOpens(k.open_id, k.close_id, wanted=True, max_ids=3)
    handles: dict[int, tuple[int, bool]] = {}
    fh = 0
    for is_open, ino, has_file in ops:
        if is_open or not handles:
            fh += 1
            bid = pt.existing(ino)
            if bid is None and pt.may_try(ino):
                bid = pt.register(ino, a_fd() if has_file else None)
            pt.opened(fh, ino, bid)
            handles[fh] = (ino, bid is not None)
        else:
            victim = sorted(handles)[ino % len(handles)]
            pt.released(victim)
            del handles[victim]
        kinds: dict[int, set[bool]] = {}
        for i, passthrough in handles.values():
            kinds.setdefault(i, set()).add(passthrough)
        assert all(len(v) == 1 for v in kinds.values())
        assert len(k.open_ids) == sum(1 for v in kinds.values() if v == {True})
    for h in list(handles):
        pt.released(h)
    assert not k.open_ids
