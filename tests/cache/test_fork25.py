"""fork25: a forked child (a torch DataLoader worker, start method "fork") and the cache it inherits.

The child inherits a ``DatahubFileSystem`` whose cache the parent opened. It used that cache
as its own: its ``close()`` (or its exit hook) unregistered the PARENT's claim on the disk
tier's index, so after the parent was killed the next process trusted the index without
rebuilding it (the pages the parent never recorded were neither counted nor evicted: the
disk budget drifted). And a read of a page the parent was fetching at the fork waited for a
leader thread that does not exist in the child: it hung. A child now opens its own cache.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable

import pytest

from datahub.cache.index import _HOLDER
from datahub.fs import DatahubFileSystem
from tests.cache.conftest import dataset_fs, hold_parent_reads, put_objects, with_cache

KEYS = ["a", "b", "c"]


@pytest.fixture
def fs(config, source):
    yield from dataset_fs(config, source, dict(zip(KEYS, [3000, 5000, 700], strict=True)), "three files")


def holders(fs: DatahubFileSystem) -> set[int]:
    """The pids registered as holders of the disk tier's index (who must close it cleanly)."""
    index = next(t for t in fs.cache.tiers if t.name == "disk").index
    with index._env.begin(db=index._meta) as txn:
        return {int(k[len(_HOLDER) :]) for k, _ in txn.cursor() if k.startswith(_HOLDER)}


def in_child(work: Callable[[], bool], timeout: float = 60.0) -> int | str:
    """Run ``work`` in a forked child: its exit code (0: it returned True), or "hung" (killed)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = 0 if work() else 2
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hung"
        time.sleep(0.02)


@pytest.mark.parametrize("how", ["close", "exit hook"])
def test_a_forked_child_leaves_its_parents_claim_on_the_index(fs, how) -> None:
    assert fs.cat("ds@1/a") == fs.data["a"]
    parent = os.getpid()
    assert parent in holders(fs)

    def child() -> bool:
        ok = fs.cat("ds@1/b") == fs.data["b"] and fs.cat("ds@1/a") == fs.data["a"]
        if how == "close":
            fs.close()
        else:  # what a child that returns normally runs at exit: the filesystem's exit hook, as
            # registered in the child now (the parent's, inherited, on main). Not every exit
            # function: in a pytest-xdist worker those are the worker's own (execnet's, other
            # tests' servers), and one of them hung a forked child in a fresh-clone suite.
            hook = fs._at_exit
            assert hook is not None and atexit.unregister(hook) is None
            hook()
        return ok

    assert in_child(child) == 0
    assert parent in holders(fs), "the child unregistered its parent's claim on the index"
    assert fs.cat("ds@1/c") == fs.data["c"]  # the parent's cache still works


def test_a_forked_child_registers_its_own_claim(fs) -> None:
    """The child's cache is its own: it claims the index under its pid while open (so a child
    killed mid-read makes the next process rebuild the index) and releases it on close."""
    fs.cat("ds@1/a")
    seen: dict[str, set[int]] = {}

    def child() -> bool:
        ok = fs.cat("ds@1/b") == fs.data["b"]
        me = os.getpid()
        ok = ok and me in holders(fs) and os.getppid() in holders(fs)
        fs.close()
        return ok

    assert in_child(child) == 0
    seen["after"] = holders(fs)
    assert seen["after"] == {os.getpid()}


def test_a_forked_child_does_not_wait_for_a_fetch_in_flight_in_its_parent(fs, monkeypatch) -> None:
    """The parent is fetching ``a`` when it forks: the child reads ``a`` itself."""
    fs.cat("ds@1/c")  # the cache is open before the fork
    parent = os.getpid()
    arrived, gate = hold_parent_reads(monkeypatch)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fs.cat("ds@1/a")))
    reader.start()
    try:
        assert arrived.wait(60)

        def child() -> bool:
            ok = fs.cat("ds@1/a") == fs.data["a"]
            fs.close()
            return ok

        outcome = in_child(child)
    finally:
        gate.set()
        reader.join(60)
    assert outcome == 0, f"child: {outcome}"
    assert got == [fs.data["a"]]
    assert parent in holders(fs)


def test_a_forked_child_never_fills_a_direct_write_buffer_of_its_parent() -> None:
    """O_DIRECT page writes copy into pooled anonymous buffers. They were MAP_SHARED (Python's
    default), so a forked child and its parent filled the same memory: a page file written
    by one could hold the other's bytes. Each process now writes into its own memory."""
    from datahub.aligned_buffers import AlignedBuffers

    pool = AlignedBuffers(keep=4)
    size = 1 << 20
    buf = pool.take(size)
    with buf.region(size) as view:
        view[:] = b"P" * size
    pool.give(buf)  # idle in the pool at the fork, as after any large page write

    def child() -> bool:
        mine = pool.take(size)  # what the child's next large page write copies into
        with mine.region(size) as view:
            view[:] = b"C" * size
        pool.give(mine)
        return True

    assert in_child(child) == 0
    again = pool.take(size)
    with again.region(size) as view:
        assert bytes(view) == b"P" * size, "the child's bytes are in the parent's buffer"


def _open_index(tmp_path) -> bool:
    from datahub.cache.index import open_index

    open_index(tmp_path / "index").close()
    return True


def _scheduler(tmp_path) -> bool:
    from datahub.cache.scheduler import process_scheduler

    return process_scheduler() is not None


def _direct_buffer(tmp_path) -> bool:
    from datahub.cache.directio import _buffers

    _buffers.give(_buffers.take(4096))
    return True


def _shard(tmp_path) -> bool:
    from datahub.errors import StorageError
    from datahub.pack.shard import _ENVIRONMENTS

    # a file that is no LMDB shard: opening it fails inside the lock, so the child takes it
    not_a_shard = tmp_path / "not-a-shard"
    not_a_shard.write_bytes(b"\0" * 64)
    try:
        _ENVIRONMENTS.acquire(not_a_shard, lambda fd, st: None)
    except StorageError:
        return True
    return False


@pytest.mark.parametrize(
    "lock, use",
    [
        ("datahub.cache.index:_OPEN_LOCK", _open_index),
        ("datahub.cache.scheduler:_PROCESS_LOCK", _scheduler),
        ("datahub.cache.directio:_buffers._lock", _direct_buffer),
        ("datahub.pack.shard:_ENVIRONMENTS._lock", _shard),
    ],
)
def test_a_process_lock_held_by_a_parent_thread_at_the_fork_does_not_hang_the_child(
    tmp_path, lock, use
) -> None:
    """A process-wide lock another thread of the parent holds at the fork (opening an index,
    the scheduler, a shard; taking a buffer) is held forever in the child, where that thread
    does not exist: each is replaced in the child (``os.register_at_fork``)."""
    import importlib

    module, _, path = lock.partition(":")
    target = importlib.import_module(module)
    for name in path.split("."):
        target = getattr(target, name)
    held, done = threading.Event(), threading.Event()

    def holder() -> None:
        with target:
            held.set()
            done.wait(60)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(60)
        outcome = in_child(lambda: use(tmp_path), timeout=30)
    finally:
        done.set()
        thread.join(60)
    assert outcome == 0, f"child: {outcome}"


def test_a_forked_child_closing_an_inherited_cache_leaves_its_parents_claim(make_cache, source) -> None:
    """Code that holds a ``TieredCache`` itself (``open_cache``) and closes it in a forked
    child: the index's last close there lets the handle go without unregistering the parent."""
    cache = make_cache()
    (ref, data), *_ = put_objects(source, [3000])
    assert cache.read(ref) == data
    index = next(t for t in cache.tiers if t.name == "disk").index

    def registered() -> set[int]:
        with index._env.begin(db=index._meta) as txn:
            return {int(k[len(_HOLDER) :]) for k, _ in txn.cursor() if k.startswith(_HOLDER)}

    assert os.getpid() in registered()

    def child() -> bool:
        cache.close()
        return True

    assert in_child(child) == 0
    assert os.getpid() in registered()
    assert cache.read(ref) == data


def test_a_forked_child_closing_an_inherited_cache_leaves_its_parents_fetch_workers(config, stores) -> None:
    """``close()`` of a cache a forked child inherited stopped the PARENT's fetch worker
    processes (SIGTERM by pid) and flushed the parent's pending index entries from the
    child: a child closes only a cache it opened."""
    from datahub.cache import open_cache

    cache = open_cache(
        with_cache(config, page_size=1024, ram_bytes=64 * 1024, disk_bytes=1024**2, fetch_workers=1),
        stores,
        fetch_workers=True,
    )
    try:
        workers = list(cache.fetch_workers._workers)
        assert workers and all(w.proc.poll() is None for w in workers)

        def child() -> bool:
            cache.close()
            return True

        assert in_child(child) == 0
        assert all(w.proc.poll() is None for w in workers), "the child stopped the parent's fetch workers"
    finally:
        cache.close()
