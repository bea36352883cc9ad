"""The policy of passthrough opens (fuse_adapter.passthrough), without a mount, over a fake
of pyfuse3's C table (fastopen.h) that also checks the kernel's rules: an inode never
has passthrough handles beside cached or direct-I/O-only ones (fs/fuse/iomode.c), every
passthrough handle of an inode names the same backing id, ids are bounded and all released, and a mount-wide refusal turns
passthrough off once."""

from __future__ import annotations

import errno
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from fuse_adapter.passthrough import PassthroughOpens

FH_BIT = 1 << 62


class FakeTable:
    """What fastopen.h does, with a descriptor's "changed" flag standing in for its fstat."""

    def __init__(self, refuse: int | None = None, capacity: int = 4096) -> None:
        self.refuse = refuse
        self.capacity = capacity
        self.next_id = 0
        self.entries: dict[int, dict] = {}  # ino -> {id, fd, published, handles, changed}
        self.open_ids: set[int] = set()
        self.c_opens = 0
        self.py_handles = 0
        self.releases = 0

    # the C side of OPEN and RELEASE (what the kernel would get answered without Python)
    def c_open(self, ino: int) -> tuple[int, int] | None:
        e = self.entries.get(ino)
        if e is None or not e["published"]:
            return None
        if e["changed"]:
            e["published"] = False
            self._settle(ino)
            return None
        e["handles"] += 1
        e["hits"] = e.get("hits", 0) + 1
        self.c_opens += 1
        return FH_BIT | ino, e["id"]

    def _settle(self, ino: int) -> None:
        e = self.entries[ino]
        if not e["published"] and e["handles"] == 0:
            self.open_ids.remove(e["id"])
            os.close(e["fd"])
            del self.entries[ino]

    # the Table protocol
    def publish(self, ino: int, fd: int) -> int:
        e = self.entries.get(ino)
        if e is not None:
            if not e["changed"]:
                e["published"] = True
                os.close(fd)
                return e["id"]
            e["published"] = False
            self._settle(ino)
            if ino in self.entries:
                raise OSError(errno.EBUSY, "busy")
        if len(self.entries) >= self.capacity:
            raise OSError(errno.ENOSPC, "full")
        if self.refuse is not None:
            raise OSError(self.refuse, os.strerror(self.refuse))
        os.fstat(fd)  # a real, open descriptor
        self.next_id += 1
        self.open_ids.add(self.next_id)
        self.entries[ino] = {"id": self.next_id, "fd": fd, "published": True, "handles": 0, "changed": False}
        return self.next_id

    def handle(self, ino: int) -> tuple[int, int] | None:
        e = self.entries.get(ino)
        if e is None:
            return None
        if e["changed"]:
            if e["published"]:
                e["published"] = False
                self._settle(ino)
            return None
        e["handles"] += 1
        self.py_handles += 1
        return FH_BIT | ino, e["id"]

    def release(self, fh: int) -> bool:
        if not fh & FH_BIT:
            return False
        ino = fh & ~FH_BIT
        e = self.entries.get(ino)
        if e is None or e["handles"] == 0:
            return False
        e["handles"] -= 1
        self.releases += 1
        self._settle(ino)
        return True

    def retract(self, ino: int) -> bool:
        e = self.entries.get(ino)
        if e is None:
            return False
        was = e["published"]
        e["published"] = False
        self._settle(ino)
        return was

    def retract_file(self, st_dev: int, st_ino: int) -> int:
        for ino, e in list(self.entries.items()):
            st = os.fstat(e["fd"])
            if (st.st_dev, st.st_ino) == (st_dev, st_ino):
                e["published"] = False
                self._settle(ino)
                return ino
        return 0

    def handles(self, ino: int) -> int:
        e = self.entries.get(ino)
        return -1 if e is None else e["handles"]

    def held_fd(self, ino: int) -> int:
        e = self.entries.get(ino)
        return -1 if e is None else os.dup(e["fd"])

    def revalidate(self, ino: int, *state: int) -> tuple[int, int] | None:
        e = self.entries.get(ino)
        if e is None:
            return None
        e["changed"] = False
        e["handles"] += 1
        self.py_handles += 1
        return FH_BIT | ino, e["id"]

    def pin(self, ino: int) -> tuple[int, int] | None:
        e = self.entries.get(ino)
        if e is None:
            return None
        e["handles"] += 1
        self.py_handles += 1
        return FH_BIT | ino, e["id"]

    def drain_hits(self) -> list[int]:
        got = [ino for ino, e in self.entries.items() if e.get("hits")]
        for ino in got:
            self.entries[ino]["hits"] = 0
        return got

    def stats(self) -> dict:
        return {
            "c_opens": self.c_opens,
            "py_handles": self.py_handles,
            "releases": self.releases,
            "entries": len(self.entries),
            "published": sum(e["published"] for e in self.entries.values()),
        }


def a_fd() -> int:
    """A descriptor of a file of its own (retract_file tells files apart by identity)."""
    return os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)


class _Files:
    """The view's page files for :class:`Mount`: a fresh file, or none (``has_file``)."""

    def __init__(self, has_file: bool) -> None:
        self.has_file = has_file

    def backing_fd(self, ino: int, *, verify: bool = True, fetch: bool = False) -> int | None:
        return a_fd() if self.has_file else None

    def backing_unchanged(self, ino: int, fd: int) -> bool:
        return True

    def backing_check(self, ino: int, fd: int) -> bool:
        return self.has_file


async def _inline(fn, *args):
    return fn(*args)


class Mount:
    """ReadOnlyOps' open and release over the policy (``PassthroughOpens.open``, run
    without a loop), after the C table's own answer, as a driver for the tests."""

    def __init__(self, pt: PassthroughOpens, table: FakeTable) -> None:
        self.pt, self.table = pt, table
        self.tokens = 0
        self.handles: dict[int, tuple[int, str, int]] = {}  # token -> (ino, kind, fh)

    def open(self, ino: int, has_file: bool = True) -> int:
        """A token for the open handle (fh of C handles repeat: one per inode)."""
        self.tokens += 1
        direct = False
        got = self.table.c_open(ino)
        if got is None:
            coro = self.pt.open(ino, _Files(has_file), _inline)
            try:
                coro.send(None)
                raise AssertionError("the open suspended")
            except StopIteration as done:
                got, direct = done.value
        if got is not None:
            self.handles[self.tokens] = (ino, f"pt{got[1]}", got[0])
        else:
            backing = self.pt.opened(self.tokens, ino, direct=direct)
            kind = f"pt{backing}:direct" if backing else "direct" if direct else "cached"
            self.handles[self.tokens] = (ino, kind, self.tokens)
        return self.tokens

    def release(self, token: int) -> None:
        _, _, fh = self.handles.pop(token)
        self.pt.released(fh)

    def check_kernel_rules(self) -> None:
        kinds: dict[int, set[str]] = {}
        for ino, kind, _ in self.handles.values():
            kinds.setdefault(ino, set()).add(kind)
        for ino, k in kinds.items():
            pts = {x.removesuffix(":direct") for x in k if x.startswith("pt")}
            assert len(pts) <= 1, f"inode {ino}: two backing ids {pts}"
            # fs/fuse/iomode.c, fuse_file_io_open: an open without the inode's backing id is
            # EIO while it has one, cached or direct I/O alike
            assert not (pts and k & {"cached", "direct"}), f"inode {ino}: passthrough and other handles"


def test_opens_of_a_published_file_are_answered_in_c() -> None:
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True)
    m = Mount(pt, t)
    first = m.open(5)  # Python publishes
    assert pt.python_opens == 1 and t.c_opens == 0
    others = [m.open(5) for _ in range(3)]
    assert t.c_opens == 3 and pt.python_opens == 1
    assert pt.drain_hits() == [5] and pt.drain_hits() == []  # reported to the cache as hits
    for h in [first, *others]:
        m.release(h)
    assert t.entries[5]["handles"] == 0 and t.open_ids  # held while published
    pt.retract(5)
    assert not t.open_ids and not t.entries


def test_a_changed_file_goes_back_to_python_and_is_never_mixed() -> None:
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True)
    m = Mount(pt, t)
    h = m.open(5)
    t.entries[5]["changed"] = True  # written, truncated, chmod'ed or evicted on disk
    again = m.open(5, has_file=False)  # checked again: it failed -> direct I/O next to it
    m.check_kernel_rules()
    pinned = t.entries[5]["id"]
    assert m.handles[again][1] == f"pt{pinned}:direct"  # names their file; reads via the daemon
    m.release(h)
    assert t.open_ids == {pinned}  # the direct handle holds the id the kernel still uses
    m.release(again)
    assert not t.open_ids
    m.release(m.open(5))  # published again from a fresh file
    assert t.open_ids and not pt._ordinary


def test_an_evicted_file_is_let_go_with_its_last_handle() -> None:
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True)
    m = Mount(pt, t)
    h = m.open(5)
    m.release(m.open(6))
    st5, st6 = (os.fstat(t.entries[i]["fd"]) for i in (5, 6))
    pt.evicted(st6.st_dev, st6.st_ino)  # no handle: closed at once
    assert 6 not in t.entries and 6 not in pt._published
    pt.evicted(st5.st_dev, st5.st_ino)  # held by a handle: closed with it
    assert t.entries[5]["handles"] == 1 and t.c_open(5) is None
    m.release(h)
    assert not t.entries and not t.open_ids


def test_an_inode_with_cached_handles_is_not_published() -> None:
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True)
    m = Mount(pt, t)
    h = m.open(7, has_file=False)
    assert not pt.may_publish(7)
    assert pt.publish(7, a_fd()) is None and not t.open_ids
    m.release(h)
    assert pt.may_publish(7)


def test_a_mount_wide_refusal_turns_passthrough_off_once() -> None:
    t = FakeTable(refuse=errno.EPERM)
    pt = PassthroughOpens(t, wanted=True)
    assert pt.publish(3, a_fd()) is None
    assert not pt.active and pt.mode.startswith("off: backing file refused")
    assert not pt.may_publish(4)


def test_published_files_are_bounded_least_recently_published_first() -> None:
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True, max_ids=2)
    m = Mount(pt, t)
    for ino in (1, 2, 3):
        m.release(m.open(ino))
    assert sorted(t.entries) == [2, 3]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["open", "release", "change", "retract"]), st.integers(0, 3), st.booleans()
        ),
        max_size=60,
    )
)
def test_kernel_rules_hold_whatever_the_order(ops: list[tuple[str, int, bool]]) -> None:
    """Any interleaving of opens (with or without a backing file), releases, files changed
    on disk and retractions: an inode never has passthrough handles beside cached or
    direct-I/O-only ones, nor two backing ids; ids are bounded; all are released at the end."""
    t = FakeTable(capacity=3)
    pt = PassthroughOpens(t, wanted=True, max_ids=2)
    m = Mount(pt, t)
    for op, ino, has_file in ops:
        if op == "open" or (op == "release" and not m.handles):
            m.open(ino, has_file)
        elif op == "release":
            m.release(sorted(m.handles)[ino % len(m.handles)])
        elif op == "change" and ino in t.entries:
            t.entries[ino]["changed"] = True
        elif op == "retract":
            pt.retract(ino)
        m.check_kernel_rules()
        assert len(t.open_ids) <= 3
    for h in list(m.handles):
        m.release(h)
    for ino in range(4):
        pt.retract(ino)
    assert not t.open_ids and not pt._ordinary


def test_a_file_changed_between_its_check_and_its_publication_is_not_used() -> None:
    """The table compares later opens with the fstat it takes at publication; a file
    changed after it was verified but before that fstat must not become the reference:
    publish asks once more after the table took it, and lets the file go if it changed."""
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True)
    asked: list[int] = []

    def changed_meanwhile() -> bool:
        asked.append(len(t.entries))  # asked after the table took the file
        return False

    assert pt.publish(5, a_fd(), changed_meanwhile) is None
    assert asked == [1]
    assert not t.entries and not t.open_ids  # its id and descriptor closed
    assert pt.may_publish(5)  # the next open checks the file again
    got = pt.publish(5, a_fd(), lambda: True)
    assert got is not None and t.entries[5]["handles"] == 1


def test_an_evicted_file_shared_by_several_inodes_is_let_go_for_all(tmp_path) -> None:
    """One page file backs several inodes when they name one object (a record kept by two
    versions, a blob of two keys): its eviction retracts it for every one of them. The C
    table's ``retract_file`` retracts the first entry it finds with the file, and finds an
    entry held by a handle again at every call: before, the others kept their descriptor,
    backing id and the removed file's disk space until a sweep."""
    page = tmp_path / "shared.page"
    page.write_bytes(b"x" * 100)
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True)
    held = pt.publish(4, os.open(page, os.O_RDONLY))  # a handle of 4 stays open
    assert held is not None
    for ino in (5, 6):
        got = pt.publish(ino, os.open(page, os.O_RDONLY))
        assert got is not None
        pt.released(got[0])
    pt.publish(7, a_fd())  # another file: kept
    st = page.stat()
    pt.evicted(st.st_dev, st.st_ino)
    assert sorted(t.entries) == [4, 7] and pt.published_inodes() == [7]
    assert not t.entries[4]["published"] and t.c_open(4) is None  # 4's handle keeps its id
    assert len(t.open_ids) == 2
    pt.released(held[0])
    assert sorted(t.entries) == [7] and len(t.open_ids) == 1
