"""Review of staged files through a real workspace mount (issue 41, review11): what a
close or fsync acknowledged is exactly what the writers wrote, after the close, after a
remount, after kill -9 of the daemon; a write that failed is never committed; and a file
the disk has room for is not refused.

Every mount here writes through FUSE passthrough (``--passthrough``), the way
tests/writeback/test_mount_passthrough.py does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuse.conftest import FuseEnv, wait_until
from tests.writeback.test_staged_review import tmpfs_of

pytestmark = pytest.mark.fuse
MiB = 1024**2


def _passthrough(env: FuseEnv) -> None:
    from fuse_adapter import fuse_ops

    if not fuse_ops.PASSTHROUGH:
        pytest.skip("pyfuse3 built without libfuse >= 3.16")


def _wait_passthrough(env: FuseEnv, mnt: Path) -> None:
    log = env.root / f"mount-{mnt.name}.log"
    wait_until(lambda: "writes: passthrough" in log.read_text(), 30)


def _kill_9(proc) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def _remounted(env: FuseEnv, mnt: Path, name: str) -> dict[str, bytes]:
    """Every file of workspace ``name`` as a fresh mount shows it (after a clean unmount or
    a kill -9: ``datahub mount`` cleans a stale mount point itself).

    After a kill -9, call it inside the killed mount's ``with`` block: the new daemon then
    replays the crashed journal, as a remount after a crash does. After the block, the
    block's teardown would first recover the workspace with a ``datahub umount`` of its own
    (~1.2 CPU-s: a process that replays and flushes it; tests/fuse/test_workspace.py and
    test_wbreview24.py check that recovery), and the fresh mount would find it recovered.

    The mount is ``env.mounted``'s (a fork of the pre-imported zygote, ready when it says so
    on its ``--ready-fd``: never the stale mount point's old entry), unmounted by the
    ``datahub umount`` handler. It was ``datahub mount --background``, whose daemon is a fresh
    interpreter (0.5 CPU-s of imports), then a ``datahub umount`` process: ~40 of these a run.
    Both commands keep tests of their own (test_lifecycle.py, test_remount.py, test_workspace.py)."""
    with env.mounted(mnt, "--workspace", name):
        return {p.name: p.read_bytes() for p in sorted(mnt.iterdir()) if p.is_file()}


def _pattern(tag: int, size: int) -> bytes:
    """Bytes that tell which writer and which offset they came from."""
    block = b"".join(i.to_bytes(8, "little") + tag.to_bytes(8, "little") for i in range(4096))
    return (block * (size // len(block) + 1))[:size]


def test_acknowledged_files_are_exact_after_kill_9_and_a_holder_after_umount_is_never_acked(
    env: FuseEnv,
) -> None:
    """One workspace, three mounts.

    1. Four threads pwrite interleaved 1 MiB slots of one file, 80 MiB in all with no fsync
       (past the 64 MiB reserved when it was made: the watcher grows it), an O_APPEND log
       beside it, small files written and closed meanwhile (descriptor numbers reused
       while the watcher acts), a file renamed and one unlinked while written, and a
       stream left open; then kill -9 of the daemon. A close that returned 0 committed
       exactly the bytes written; one that returned ENOSPC (a writer faster than the
       watcher) left no file; the open stream (never acknowledged) is absent.
    2. The remount shows exactly that. A holder then keeps a staged file open across
       ``datahub umount`` (docs/writeback.md point 7): its ``write(2)`` still succeeds (the
       kernel writes the backing file without the FUSE connection), so neither its fsync
       nor its close may return 0 unless those bytes are committed.
    3. A last mount shows what the umount closed.
    """
    _passthrough(env)
    mnt = env.mountpoint("streams")
    slots, writers = 80, 4
    big = b"".join(_pattern(i, MiB) for i in range(slots))
    acked: dict[str, bytes] = {}
    refused: set[str] = set()
    with env.mounted(mnt, "--workspace", "streams", "--passthrough") as proc:
        _wait_passthrough(env, mnt)
        fd = os.open(mnt / "big.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        log_fd = os.open(mnt / "log.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
        lines: list[bytes] = []
        lock = threading.Lock()

        def writer(k: int) -> None:
            for i in range(k, slots, writers):
                assert os.pwrite(fd, big[i * MiB : (i + 1) * MiB], i * MiB) == MiB
                line = f"writer {k} slot {i}\n".encode()
                with lock:
                    assert os.write(log_fd, line) == len(line)
                    lines.append(line)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(writers)]
        for t in threads:
            t.start()
        for n in range(30):  # small files, each acknowledged by its close, while the stream goes on
            data = os.urandom(1000 + n * 997)
            (mnt / f"small-{n}").write_bytes(data)
            acked[f"small-{n}"] = data
        moved, gone, open_stream = os.urandom(3 * MiB + 5), os.urandom(2 * MiB), _pattern(99, 8 * MiB)
        mfd = os.open(mnt / "old-name", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.write(mfd, moved[:MiB])
        os.rename(mnt / "old-name", mnt / "new-name")
        os.write(mfd, moved[MiB:])
        os.close(mfd)
        acked["new-name"] = moved
        gfd = os.open(mnt / "gone", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.write(gfd, gone[:MiB])
        os.unlink(mnt / "gone")
        os.write(gfd, gone[MiB:])
        os.fsync(gfd)
        os.close(gfd)
        ofd = os.open(mnt / "unacked.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.write(ofd, open_stream)
        for t in threads:
            t.join()
        for name, fdesc, data in (("big.bin", fd, big), ("log.txt", log_fd, b"".join(lines))):
            try:
                os.close(fdesc)
                acked[name] = data
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                refused.add(name)
        for name, data in acked.items():
            assert (mnt / name).read_bytes() == data, name
        _kill_9(proc)
        with contextlib.suppress(OSError):
            os.close(ofd)
        got = _remounted(env, mnt, "streams")
        for name, data in acked.items():
            assert got.get(name) == data, f"{name}: acknowledged by its close, not as written after kill -9"
        for name in refused:
            assert name not in got, f"{name}: its close failed with ENOSPC, yet it was committed"
        assert "log.txt" in acked  # a log of small appends stays far inside its reservation
        assert set(got) == set(acked), "a file no close acknowledged came back"

    before, after = os.urandom(300_000), os.urandom(200_000)
    with env.mounted(mnt, "--workspace", "streams", "--passthrough"):
        _wait_passthrough(env, mnt)
        held = os.open(mnt / "held.bin", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        assert os.write(held, before) == len(before)
        env.cli("umount", str(mnt))
        outcome = {}
        for call, args in (("write", (held, after)), ("fsync", (held,)), ("close", (held,))):
            try:
                getattr(os, call)(*args)
                outcome[call] = 0
            except OSError as exc:
                outcome[call] = exc.errno
    got = _remounted(env, mnt, "streams")
    if outcome["write"] == 0 and (outcome["fsync"] == 0 or outcome["close"] == 0):
        assert got.get("held.bin") == before + after, f"acknowledged after umount, lost: {outcome}"
    assert got.get("held.bin") in (before, before + after), outcome


@pytest.mark.xfail(
    strict=True,
    reason=(
        "review11: numpy.memmap(mode='w+') seeks to the last byte and writes it, so a 70 MiB array "
        "is past the 64 MiB reserved at creation in one call; the watcher never grows a file already "
        "past its reservation and the close fails with ENOSPC (np.memmap raises OSError 28) on a disk "
        "with gigabytes free; docs/writeback.md names numpy.memmap as what --passthrough is for. "
        "Reproduce: this test (the second FLUSH's log line blamed a quota there was not: reserve13 "
        "made it name every cause of space). "
        "reserve13: left, as no sound rule takes it: a write from the same offset that got its "
        "first page and failed for space at the 70 MiB boundary leaves the same size, blocks and "
        "event (docs/writeback.md, 'A sparse jump past the reservation is refused, soundly')."
    ),
)
def test_numpy_memmap_bigger_than_the_first_reservation_is_committed(env: FuseEnv) -> None:
    """docs/writeback.md names ``numpy.memmap`` outputs as what ``--passthrough`` is for.
    numpy makes a new memmap by writing one byte at its last offset (seek, write): a file of
    70 MiB is then past the 64 MiB reserved when it was made, with the disk far from full."""
    np = pytest.importorskip("numpy")
    _passthrough(env)
    mnt = env.mountpoint("arrays")
    data = np.frombuffer(os.urandom(70 * MiB), dtype=np.uint8)
    with env.mounted(mnt, "--workspace", "arrays", "--passthrough"):
        _wait_passthrough(env, mnt)
        out = np.memmap(mnt / "out.npy", dtype=np.uint8, mode="w+", shape=data.shape)
        out[:] = data
        out.flush()
        del out
        assert (mnt / "out.npy").read_bytes() == data.tobytes()
    assert _remounted(env, mnt, "arrays") == {"out.npy": data.tobytes()}


@pytest.fixture
def shared_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 48 MiB tmpfs for the shared tier, and so for the staged files."""
    with tmpfs_of(tmp_path, "48m") as mount_point:
        yield mount_point


def test_files_open_at_once_do_not_fail_for_space_their_bytes_have(env: FuseEnv, shared_disk: Path) -> None:
    """A job writing a few shards at once (a data loader's workers): 10 files of 100 KB,
    open together, on a shared tier with 48 MiB free. Each staged file reserves half of
    what the disk has left (up to 64 MiB) while it is open, so with ten open the disk is
    full of reservations and the closes' copies into the shared tier have no room: through
    the daemon these closes all succeed."""
    _passthrough(env)
    with open(env.config_path, "a") as fh:  # [cache] is the config's last section
        fh.write(f'shared_url = "{(shared_disk / "shared").as_uri()}"\n')
    mnt = env.mountpoint("shards")
    shards = {f"shard-{i}": os.urandom(100_000 + i) for i in range(10)}
    failed: dict[str, str] = {}  # name -> which call failed and how
    written: dict[str, bytes] = {}  # what each writer got in
    with env.mounted(mnt, "--workspace", "shards", "--passthrough"):
        _wait_passthrough(env, mnt)
        fds = {name: os.open(mnt / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) for name in shards}
        for name, fd in fds.items():
            done = 0
            try:
                while done < len(shards[name]):
                    done += os.write(fd, shards[name][done:])
            except OSError as exc:
                failed[name] = f"write: {errno.errorcode[exc.errno]} after {done:,} bytes"
            written[name] = shards[name][:done]
        acked = {}
        for name, fd in fds.items():
            try:
                os.close(fd)
                acked[name] = written[name]
            except OSError as exc:
                failed.setdefault(name, f"close: {errno.errorcode[exc.errno]}")
    got = _remounted(env, mnt, "shards")
    for name, data in acked.items():  # whatever failed: a close that returned 0 kept exactly the bytes
        assert got.get(name) == data and name not in failed, f"{name}: close returned 0, committed wrong"
    assert not failed, f"failed for space ({len(failed)} of {len(shards)} files): {failed}"
    assert got == shards


@pytest.mark.parametrize(
    "writes",
    # passthrough: a strict xfail until emfile12 (creates past the limit failed with EIO, the
    # closes with EMFILE: all 300); files short of descriptors now go through the daemon
    ["passthrough", "daemon"],
)
def test_more_files_open_at_once_than_the_daemon_has_descriptors(env: FuseEnv, writes: str) -> None:
    """Each staged file holds a descriptor in the daemon for as long as it is open; a
    daemon out of descriptors (RLIMIT_NOFILE, here lowered to 256 with prlimit) must serve
    the files it cannot stage through itself, as a mount without --passthrough does, not
    fail their open(2) or their close(2). Through the daemon (the same run's baseline) all
    300 files are committed."""
    _passthrough(env)
    mnt = env.mountpoint("fds")
    files = {f"f-{i}": os.urandom(1000 + i) for i in range(300)}
    failed: dict[str, str] = {}
    flags = ("--passthrough",) if writes == "passthrough" else ()
    with env.mounted(mnt, "--workspace", "fds", *flags) as proc:
        if flags:
            _wait_passthrough(env, mnt)
        subprocess.run(["prlimit", f"--pid={proc.pid}", "--nofile=256:256"], check=True)
        fds = {}
        for name in files:
            try:
                fds[name] = os.open(mnt / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            except OSError as exc:
                failed[name] = f"open: {errno.errorcode[exc.errno]}"
        for name, fd in fds.items():
            try:
                os.write(fd, files[name])
                os.close(fd)
            except OSError as exc:
                failed.setdefault(name, f"write/close: {errno.errorcode[exc.errno]}")
    assert not failed, f"{len(failed)} of {len(files)} failed, e.g. {sorted(failed.items())[:3]}"
    assert _remounted(env, mnt, "fds") == files
