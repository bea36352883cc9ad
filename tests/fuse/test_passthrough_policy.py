"""The open policy of a read-only mount and its fast path, as plain decisions: no FUSE, no
mount, no pyfuse3 (``fuse_adapter.passthrough``, ``fuse_adapter.page_files``,
``fuse_adapter.fast_path``). The real-mount tests (test_passthrough.py, test_fastread.py,
...) check that the shim carries these decisions out."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fuse_adapter.fast_path import Asked, Build, decide, write_passthrough_off
from fuse_adapter.passthrough import PassthroughOpens, Route, open_route
from tests.fuse.test_passthrough_opens import FakeTable, a_fd

FULL = Build(
    no_open_fh=1 << 62,
    passthrough=True,
    fastopen=True,
    fastloop=True,
    uring=True,
    lookup_in_c=True,
    fastread=True,
    backing_direct_io=True,
)


def complete(coro):
    """Run a coroutine that never suspends (its ``run`` is inline) to its result."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the open suspended without a loop")


async def inline(fn, *args):
    return fn(*args)


class Files:
    """The view's page files (``page_files.BackingFiles``), with what each call saw."""

    def __init__(self, *, first: int | None = -1, passes: bool = True, unchanged: bool = True) -> None:
        self.first, self.passes, self.unchanged = first, passes, unchanged
        self.calls: list[tuple] = []

    def backing_fd(self, ino: int, *, verify: bool = True, fetch: bool = False) -> int | None:
        self.calls.append(("backing_fd", verify, fetch))
        if not verify and not fetch:
            return self.first if self.first is None or self.first < 0 else a_fd()
        return a_fd() if self.passes else None

    def backing_unchanged(self, ino: int, fd: int) -> bool:
        return self.unchanged

    def backing_check(self, ino: int, fd: int) -> bool:
        self.calls.append(("backing_check",))
        return self.passes


# --- which route an OPEN takes -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("write", "virtual", "zero_message", "passthrough", "route"),
    [
        (False, False, True, False, Route.ZERO_MESSAGE),
        (True, False, True, False, Route.ORDINARY),  # a write is refused by the view, not here
        (False, True, True, False, Route.ZERO_MESSAGE),
        (False, False, False, True, Route.PASSTHROUGH),
        (False, True, False, True, Route.ORDINARY),  # virtual files: their size changes
        (True, False, False, True, Route.ORDINARY),
        (False, False, False, False, Route.ORDINARY),
    ],
)
def test_the_route_of_an_open(write, virtual, zero_message, passthrough, route) -> None:
    got = open_route(write=write, virtual=virtual, zero_message_open=zero_message, passthrough=passthrough)
    assert got is route


# --- what an open on the passthrough route gets ------------------------------------------------
def test_a_file_not_verified_yet_is_checked_in_a_thread_then_published() -> None:
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True)
    files = Files(first=-1)
    got, direct = complete(pt.open(5, files, inline))
    assert got is not None and not direct and t.entries[5]["published"]
    assert files.calls == [("backing_fd", False, False), ("backing_fd", True, False)]
    assert pt.python_opens == 1


def test_a_cold_file_is_fetched_whole_for_its_first_open() -> None:
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True)
    files = Files(first=-2)
    got, _ = complete(pt.open(5, files, inline))
    assert got is not None
    assert files.calls == [("backing_fd", False, False), ("backing_fd", True, True)]


def test_a_file_changed_while_it_was_published_is_not_handed_to_the_kernel() -> None:
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True)
    got, direct = complete(pt.open(5, Files(first=0, unchanged=False), inline))
    assert got is None and not direct  # an ordinary, cached handle
    assert 5 not in t.entries and not t.open_ids


def test_no_page_file_means_an_ordinary_open() -> None:
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True)
    got, direct = complete(pt.open(5, Files(first=None), inline))
    assert (got, direct) == (None, False) and not t.entries


def test_held_handles_of_a_changed_file_are_rechecked_and_failing_that_get_direct_io() -> None:
    t = FakeTable()
    pt = PassthroughOpens(t, wanted=True)
    first, _ = complete(pt.open(5, Files(first=0), inline))
    assert first is not None
    t.entries[5]["changed"] = True  # written, truncated or evicted on disk; its handle still open
    again, direct = complete(pt.open(5, Files(first=0, passes=True), inline))
    assert again is not None and not direct  # checked again, still the verified bytes
    t.entries[5]["changed"] = True
    files = Files(first=0, passes=False)
    failed, direct = complete(pt.open(5, files, inline))
    assert failed is None and direct  # through the daemon, with direct I/O
    assert ("backing_check",) in files.calls
    # naming the held file: the kernel fails any other open beside its passthrough handles
    assert pt.opened(9, 5, direct=True) == t.entries[5]["id"]
    assert t.entries[5]["handles"] == 3  # the id stays open while the direct handle is
    pt.released(9)
    assert t.entries[5]["handles"] == 2


# --- the fast path: asked, the build, in effect ----------------------------------------------
def test_without_page_cache_sampling_the_default_is_zero_message_opens_with_reads_in_c() -> None:
    """FULL cannot sample the page cache at opens, so the automatic mode (the default where it
    can run: test_read_mode_policy) cannot; the default then is zero-message opens."""
    fast = decide(Asked(), FULL, backs_files=True, transport=(True, "io_uring (one queue per CPU)"))
    assert fast.zero_message_open and fast.fastread and fast.fastread_off == ""
    assert not fast.passthrough and fast.passthrough_off == "zero-message opens"
    assert fast.fastloop and fast.lookup_in_c and fast.io_uring


def test_passthrough_when_asked_replaces_zero_message_opens_and_reads_in_c() -> None:
    fast = decide(Asked(passthrough=True), FULL, backs_files=True)
    assert fast.passthrough and not fast.zero_message_open and fast.zero_message_wanted
    assert not fast.fastread and fast.fastread_off == "FUSE passthrough"


def test_without_reads_in_c_the_default_falls_back_to_passthrough() -> None:
    no_fastread = Build(**{**FULL.__dict__, "fastread": False})
    assert decide(Asked(), no_fastread, backs_files=True).passthrough
    fast = decide(Asked(fastloop=False), FULL, backs_files=True)  # --no-fastloop: READs in C need it
    assert fast.passthrough and not fast.fastloop and not fast.lookup_in_c and not fast.io_uring
    assert not decide(Asked(fastread=False), FULL, backs_files=True).passthrough  # --no-fastread alone


def test_no_page_files_no_passthrough_and_no_reads_in_c() -> None:
    fast = decide(Asked(passthrough=True), FULL, backs_files=False)  # --no-cache, no disk tier
    assert not fast.passthrough and not fast.fastread and fast.zero_message_open
    assert decide(Asked(passthrough=False), FULL, backs_files=True).fastread  # --no-passthrough


def test_a_build_without_the_tables_says_why() -> None:
    old = Build(no_open_fh=1 << 62, passthrough=True)  # libfuse 3.17, none of datahub's C tables
    fast = decide(Asked(passthrough=True), old, backs_files=True)
    assert (
        not fast.passthrough and fast.passthrough_off == "pyfuse3 built without its open table (fastopen.h)"
    )
    assert fast.zero_message_open and not fast.fastread
    system = decide(Asked(passthrough=True), Build(no_open_fh=1 << 62), backs_files=True)
    assert "libfuse 3.17" in system.passthrough_off
    assert not decide(Asked(), Build(), backs_files=True).zero_message_open  # reads cannot name inodes


def test_reads_in_c_off_reasons() -> None:
    assert decide(Asked(fastread=False), FULL, backs_files=True).fastread_off == "--no-fastread"
    no_c = Build(**{**FULL.__dict__, "fastread": False})
    assert decide(Asked(passthrough=False), no_c, backs_files=True).fastread_off == "--no-fastread"


def test_io_uring_needs_the_kernel_the_build_and_the_c_loop() -> None:
    assert not decide(Asked(), FULL, transport=(False, "/dev/fuse (--no-io-uring)")).io_uring
    no_uring = Build(**{**FULL.__dict__, "uring": False})
    assert not decide(Asked(), no_uring, transport=(True, "io_uring")).io_uring
    assert decide(Asked(), FULL, transport=(True, "io_uring")).transport == "io_uring"


def test_the_build_is_probed_from_the_module() -> None:
    fake = SimpleNamespace(
        NO_OPEN_FH=4, PASSTHROUGH=True, FASTLOOP=True, URING=False, FASTREAD=True,
        passthrough_publish=print, lookup_publish=print,
    )  # fmt: skip
    assert Build.probe(fake) == Build(
        no_open_fh=4,
        passthrough=True,
        fastopen=True,
        fastloop=True,
        uring=False,
        lookup_in_c=True,
        fastread=True,
    )
    no_loop = SimpleNamespace(FASTLOOP=False, FASTREAD=True, lookup_publish=print)
    assert Build.probe(no_loop) == Build()  # READs and LOOKUPs in C need the C reader thread


def test_workspace_write_passthrough() -> None:
    assert write_passthrough_off(False, FULL).startswith("the default")
    assert "libfuse >= 3.16" in write_passthrough_off(True, Build())
    assert write_passthrough_off(True, FULL) == ""
    # an O_SYNC handle beside staged ones needs direct I/O with a backing id (wbreview72)
    old = Build(**{**FULL.__dict__, "backing_direct_io": False})
    assert "rebuild it with `make install`" in write_passthrough_off(True, old)


def test_the_mount_log_says_what_is_in_effect() -> None:
    default = decide(Asked(), FULL, backs_files=True, transport=(True, "io_uring (one queue per CPU)"))
    assert default.summary() == (
        "opens: zero-message; READs in C: on; C loop: on; LOOKUPs in C: on; requests: io_uring (one queue per CPU)"
    )
    pt = decide(
        Asked(passthrough=True, fastloop=False), FULL, backs_files=True, transport=(False, "/dev/fuse")
    )
    assert pt.summary() == (
        "opens: passthrough, answered in C; READs in C: off (FUSE passthrough); C loop: off; "
        "LOOKUPs in C: off; requests: /dev/fuse"
    )
