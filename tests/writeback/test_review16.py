"""review16: an adversarial review of gclock15 (an open file's garbage deferred in memory and
taken off the journal's list in batches, garbage collected before the flush plan, the
flusher's turns granted in order).

The promise under attack: a close returns only when the file is durable in the shared tier
and journaled, a crash at any moment loses no acknowledged file, and garbage collection never
deletes a chunk a handle or a record still needs. Each test drives a real workspace (both
shared-tier layouts: pack files and one file per chunk) through a path gclock15's own tests
do not: a file unlinked or replaced while open, a file reopened after its garbage was
deferred, a crash between a collection's deletes and its journal record, a waiter interrupted
in the turn queue, many committers beside looping flushers.
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from datahub.errors import NotFound, ObjectChanged
from datahub.writeback.flusher import _UNLIST, _Turns
from tests.writeback.conftest import CHUNK, LAYOUTS, Env, objects_of, write
from tests.writeback.flushed import only_copy
from tests.writeback.test_review14wb import SIZE, _generation

HANG_GUARD = 120.0  # seconds: only a guard against a hang, never a measure of speed
GENERATIONS = _UNLIST // 4 + 8  # each leaves 4 chunks of garbage: more than one batch in all


def _rewrite(fh, n: int) -> None:
    """Generation ``n`` written whole over the file, then fsynced (its old chunks: garbage)."""
    data = _generation(n)
    for offset in range(0, SIZE, CHUNK):
        fh.write(offset, data[offset : offset + CHUNK])
    fh.fsync()


def _referenced(ws) -> set[str]:
    """The shared-tier objects (chunk files or packs) some journal record names."""
    with ws.journal.read() as txn:
        keys = {key for _id, rec in txn.files() for key, _n in rec["chunks"].values()}
    return objects_of(ws, keys)


def _read(ws, path: str, n: int) -> bytes:
    """Up to ``n`` bytes of ``path`` through a handle closed again (an open one defers garbage)."""
    with ws.open(path) as fh:
        return fh.read(0, n)


def _listed(ws) -> list[str]:
    with ws.journal.read() as txn:
        return txn.garbage()


def test_an_unlinked_open_files_chunks_stay_readable_through_flushes_and_go_at_its_close(env: Env) -> None:
    """Unlinked while open, the file lives on through its handle (POSIX): rewritten more than
    a batch of garbage after the unlink, flushed again and again, its handle still reads its
    last generation. Once closed, every chunk it ever had leaves the shared tier."""
    ws = env.open()
    write(ws, "keep", b"k" * (2 * CHUNK + 5))
    fh = ws.open("ckpt", create=True)
    for n in range(GENERATIONS):
        _rewrite(fh, n)
    ws.unlink("ckpt")
    for n in range(GENERATIONS, 2 * GENERATIONS):
        _rewrite(fh, n)
        if n % 8 == 0:
            ws.flush()
    ws.flush()
    assert fh.read(0, SIZE + 1) == _generation(2 * GENERATIONS - 1)
    assert len(_listed(ws)) < _UNLIST, "the open file's garbage is still listed for every flush to read"
    fh.close()
    ws.flush()
    assert set(env.shared_keys()) == _referenced(ws)
    assert _read(ws, "keep", 3 * CHUNK) == b"k" * (2 * CHUNK + 5)
    with pytest.raises(NotFound):  # the name went with the unlink
        ws.open("ckpt")


def test_a_target_replaced_by_rename_while_open_keeps_its_bytes_for_its_handle(env: Env) -> None:
    """``rename(a, b)`` over a ``b`` that a handle keeps open and rewrites: ``b``'s old file
    lives on through the handle (its garbage deferred, never deleted under it), the name
    holds ``a``'s bytes, and at the handle's close all of the old file's chunks go."""
    ws = env.open()
    fh = ws.open("b", create=True)
    for n in range(GENERATIONS):
        _rewrite(fh, n)
    write(ws, "a", b"A" * (CHUNK + 7))
    ws.flush()
    ws.rename("a", "b")
    for n in range(GENERATIONS, GENERATIONS + 8):
        _rewrite(fh, n)
        ws.flush()
    assert fh.read(0, SIZE + 1) == _generation(GENERATIONS + 7)
    assert _read(ws, "b", 2 * CHUNK) == b"A" * (CHUNK + 7)
    fh.close()
    ws.flush()
    assert set(env.shared_keys()) == _referenced(ws)
    assert _read(ws, "b", 2 * CHUNK) == b"A" * (CHUNK + 7)


@pytest.mark.parametrize("end", ["close", "crash"])
def test_a_file_reopened_before_its_deferred_garbage_went_loses_nothing(env: Env, end: str) -> None:
    """Rewritten open (garbage deferred, off the list), closed, and opened again before any
    collection ran: the deferred keys of its earlier life must wait again, then go, and
    never take a chunk of the new life with them (both lives share the file id)."""
    ws = env.open()
    fh = ws.open("ckpt", create=True)
    for n in range(GENERATIONS):
        _rewrite(fh, n)
    ws.flush()  # the earlier life's garbage: deferred, and more than a batch: off the list
    assert len(_listed(ws)) < _UNLIST
    fh.close()
    fh = ws.open("ckpt")  # before any collection saw it closed
    for n in range(GENERATIONS, GENERATIONS + 6):
        _rewrite(fh, n)
        ws.flush()
        assert fh.read(0, SIZE + 1) == _generation(n)
    last = _generation(GENERATIONS + 5)
    if end == "close":
        fh.close()
        ws.flush()
    else:
        ws = env.crash_and_reopen(ws)  # fsynced: acknowledged, so it must survive
    assert _read(ws, "ckpt", SIZE + 1) == last
    ws.flush()
    assert set(env.shared_keys()) == _referenced(ws)


def test_a_crash_between_a_collections_deletes_and_its_journal_record_loses_nothing(env: Env) -> None:
    """What a kill -9 inside ``gc`` leaves: the garbage chunks deleted from the shared tier,
    the journal still listing them (its transaction never ran), and an open file's deferred
    keys known to no one. The next open must recover (a delete of a chunk already gone is
    not an error that stops collection for good), keep every acknowledged file, and leave
    exactly the referenced objects."""
    ws = env.open()
    write(ws, "other", b"o" * (3 * CHUNK))
    fh = ws.open("ckpt", create=True)
    for n in range(GENERATIONS):
        _rewrite(fh, n)
    ws.flush()  # deferred: more than a batch, so some are off the list
    fh.close()
    write(ws, "other", b"p" * (2 * CHUNK + 1))  # its old chunks: listed garbage
    listed = _listed(ws)
    assert listed, "nothing listed: the crash would have nothing to interrupt"
    for key in listed + sorted({k for keys in ws.flusher._deferred.values() for k in keys}):
        ws.chunks.delete(key)  # the collection's deletes ran, then the process died
    ws = env.crash_and_reopen(ws)
    assert _read(ws, "ckpt", SIZE + 1) == _generation(GENERATIONS - 1)
    assert _read(ws, "other", 3 * CHUNK) == b"p" * (2 * CHUNK + 1)
    assert _listed(ws) == []
    # and collection still works after it: new garbage goes
    write(ws, "other", b"q" * 9)
    ws.flush()
    assert _listed(ws) == []
    assert set(env.shared_keys()) == _referenced(ws)


def test_a_waiter_interrupted_in_the_turn_queue_gives_its_place_up() -> None:
    """A caller interrupted while it waits for its turn (a signal's exception in the main
    thread: Ctrl-C during ``datahub cache flush``) leaves the queue: the turn still passes
    from the holder to the caller behind it, and afterwards the turn is free."""
    turns = _Turns()
    holding, release = threading.Event(), threading.Event()
    order: list[str] = []

    class Interrupted(Exception):
        pass

    def holder() -> None:
        with turns.turn():
            holding.set()
            release.wait(HANG_GUARD)
            order.append("holder")

    def behind() -> None:
        with turns.turn():
            order.append("behind")

    def interrupt(_signum, _frame) -> None:
        raise Interrupted

    first = threading.Thread(target=holder)
    first.start()
    assert holding.wait(HANG_GUARD)
    queued = threading.Thread(target=behind)
    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:

        def queue_then_interrupt() -> None:
            while len(turns._waiting) < 1:  # until the main thread has asked (a wait, not a measure)
                time.sleep(0.001)
            queued.start()
            while len(turns._waiting) < 2:
                time.sleep(0.001)
            os.kill(os.getpid(), signal.SIGUSR1)

        helper = threading.Thread(target=queue_then_interrupt)
        helper.start()
        with pytest.raises(Interrupted), turns.turn():
            order.append("interrupted")  # never: the signal came while it waited
        helper.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    release.set()
    first.join(HANG_GUARD)
    queued.join(HANG_GUARD)
    assert not queued.is_alive(), "the turn never reached the caller queued behind the interrupted one"
    assert order == ["holder", "behind"]
    with turns.turn():  # free again: not held by the interrupted caller's place
        pass
    assert not turns._held and not turns._waiting


def test_many_committers_beside_looping_flushers_all_finish(env: Env, catalog) -> None:
    """Eight threads flush in a loop without a breath while six committers each commit the
    workspace once: with turns granted in order none of them waits for ever (a commit is
    one flush turn and one read), and every version holds every file whole."""
    from datahub.workspaces import commit_workspace

    ws = env.open()
    files = {f"f{i}": bytes([65 + i]) * (CHUNK + i) for i in range(5)}
    for path, data in files.items():
        write(ws, path, data)
    stop = threading.Event()
    errors: list[BaseException] = []
    versions: list = []

    def loop() -> None:
        try:
            while not stop.is_set():
                ws.flush()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    def commit(n: int) -> None:
        try:
            versions.append(commit_workspace(ws, catalog, f"many{n}"))
        except BaseException as exc:
            errors.append(exc)

    flushers = [threading.Thread(target=loop) for _ in range(8)]
    committers = [threading.Thread(target=commit, args=(n,)) for n in range(6)]
    for t in flushers:
        t.start()
    try:
        for t in committers:
            t.start()
        for t in committers:
            t.join(HANG_GUARD)
        stuck = [t.name for t in committers if t.is_alive()]
    finally:
        stop.set()
        for t in flushers:
            t.join()
        for t in committers:
            t.join()
    assert not errors, errors
    assert not stuck, f"committers never finished beside the looping flushers: {stuck}"
    assert len(versions) == 6
    for version in versions:
        records = {r.key: r.size for r in catalog.list_records(version.dataset, version.seq)}
        assert records == {path: len(data) for path, data in files.items()}


def test_a_takeover_on_a_node_sharing_the_shared_tier_keeps_the_lapsed_nodes_acknowledged_file(
    tmp_path: Path,
) -> None:
    """Two nodes share one catalog and one shared tier (docs/writeback.md, "Limits": nodes
    that share a shared tier must share the catalog too; csi/deploy/config.yaml ships one
    ``shared_url`` for every node: "several nodes may point at one Ceph bucket"). Node a
    acknowledges a file (its
    close returned: durable in the shared tier and journaled) and loses its lease before its
    flush; node b takes the workspace over. "A holder that lost its lease keeps its unflushed
    files in its journal: they reach the bucket only once that node holds the lease again."
    Node b's open ran recovery, which deleted every chunk object under
    ``writeback/<workspace>/`` that *its* journal did not reference: node a's chunks. When
    node a held the lease again, its recovery found the chunk gone and dropped the file: an
    acknowledged file lost without a crash of the node that acknowledged it. Fixed by
    takeover16: each journal writes under its own prefix and recovers only there."""
    from datahub.catalog.sqlite_store import SQLiteCatalogStore
    from datahub.config import load_config
    from datahub.storage import StoreRegistry
    from datahub.writeback import open_workspace
    from tests.writeback.test_lease import LEASE_TTL, Clock

    def node(name: str):
        config = load_config(
            env={},
            overrides={"home": str(tmp_path / name), "objects_url": (tmp_path / "objects").as_uri(),
                       "cache": {"page_size": CHUNK, "flush_interval": 3600,
                                 "shared_url": (tmp_path / "shared-tier").as_uri()}},
        )  # fmt: skip
        return config, StoreRegistry(config)

    clock = Clock()
    catalog = SQLiteCatalogStore(tmp_path / "catalog.db", clock=clock)
    (config_a, stores_a), (config_b, stores_b) = node("a"), node("b")
    try:
        ws_a = open_workspace("shared", config_a, stores_a, lease=catalog, lease_ttl=LEASE_TTL)
        write(ws_a, "early.txt", b"acknowledged before the takeover")
        clock.now += 60  # a's lease lapsed in the catalog's eyes (a partition, a stalled node)
        open_workspace("shared", config_b, stores_b, lease=catalog).close()  # b's turn, nothing written
        ws_a.abandon()  # node a's process ends without its flush (it is fenced: it cannot push)
        ws_a = open_workspace("shared", config_a, stores_a, lease=catalog)  # a holds the lease again
        try:
            assert _read(ws_a, "early.txt", 100) == b"acknowledged before the takeover"
        finally:
            ws_a.close()
        assert only_copy(tmp_path / "objects" / "workspaces" / "shared", "early.txt") == (
            b"acknowledged before the takeover"
        )
    finally:
        catalog.close()
        stores_a.close()
        stores_b.close()


def test_commits_flush_socket_and_background_flusher_under_a_renewed_lease_all_finish(
    tmp_path: Path,
) -> None:
    """The turn's other neighbours: the workspace holds its writer lease (renewed every second
    by its own thread), its background flusher runs every 50 ms, ``datahub cache flush``
    from other processes arrives through the owner's flush socket (``flush_workspace``), and
    committers commit beside a writer that keeps closing files. Nobody waits for ever, the
    lease is never lost (a renewal never waits for a turn), and each version holds whole
    files only."""
    from datahub.catalog import open_catalog
    from datahub.catalog.sqlite_store import SQLiteCatalogStore
    from datahub.config import load_config
    from datahub.errors import Conflict, ObjectChanged
    from datahub.storage import StoreRegistry
    from datahub.workspaces import commit_workspace
    from datahub.writeback import flush_workspace, open_workspace
    from tests.writeback.test_lease import LEASE_TTL

    config = load_config(
        env={},
        overrides={"home": str(tmp_path / "node"), "objects_url": (tmp_path / "objects").as_uri(),
                   "cache": {"page_size": CHUNK, "flush_interval": 0.05}},
    )  # fmt: skip
    stores = StoreRegistry(config)
    leases = SQLiteCatalogStore(tmp_path / "leases.db")
    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    ws = open_workspace("turns", config, stores, lease=leases, lease_ttl=LEASE_TTL)
    stop = threading.Event()
    errors: list[BaseException] = []
    versions: list = []

    def guarded(fn) -> None:
        try:
            fn()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    written = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            write(ws, f"w{n % 7}", bytes([n % 251]) * (CHUNK + n % 3000))
            if n == 20:
                written.set()

    def socket_flusher() -> None:
        while not stop.is_set():
            flush_workspace("turns", config, stores)  # ws holds the lock: through its socket

    def committer(n: int) -> None:
        done = 0
        while done < 3 and not stop.is_set():
            try:
                versions.append(commit_workspace(ws, catalog, f"turns{n}"))
                done += 1
            except (Conflict, ObjectChanged):
                continue  # a close between the flush and the read: again

    loops = [threading.Thread(target=guarded, args=(f,)) for f in (writer, socket_flusher, socket_flusher)]
    committers = [threading.Thread(target=guarded, args=(lambda n=n: committer(n),)) for n in range(4)]
    try:
        for t in loops:
            t.start()
        assert written.wait(HANG_GUARD), errors
        for t in committers:
            t.start()
        for t in committers:
            t.join(HANG_GUARD)
        stuck = [t.name for t in committers if t.is_alive()]
        stop.set()
        for t in loops + committers:
            t.join(HANG_GUARD)
        assert not [t.name for t in loops if t.is_alive()], "a flusher or the writer hung"
        assert not errors, errors
        assert not stuck, f"committers never finished: {stuck}"
        assert len(versions) == 12 and None not in versions
        assert ws.journal.fence("probe") is None  # the lease held throughout
        for version in versions:
            for record in catalog.list_records(version.dataset, version.seq):
                store, key = stores.for_url(record.url)
                # under the record's etag: concurrent commits of one content pin its blob once
                # and never replace it (test_a_commit_of_identical_files_leaves_every_record_readable)
                data = store.read(key, etag=record.etag)
                assert len(data) == record.size and len(set(data)) == 1, record.key  # one close's bytes
                assert record.checksum == f"sha256:{hashlib.sha256(data).hexdigest()}", record.key
    finally:
        stop.set()
        ws.close()
        catalog.close()
        leases.close()
        stores.close()


def test_a_commit_of_identical_files_leaves_every_record_readable(env: Env, catalog) -> None:
    """Sixteen files of the same bytes (copies of one config, sixteen empty logs) committed at
    once: their records share one blob (``blobs/sha256/<digest>``). ``_pin_blobs`` pins files
    eight at a time: each finds no blob (``stat``), copies it and ``put``s it, and a local
    objects store's put replaces the file (a new inode: a new etag). Every record but the last
    put's names an etag the blob no longer has, and reading it under its etag fails for good
    with ObjectChanged (4 to 7 of the 16 in review16's runs; 6 of 16 empty ``__init__.py``
    files of an output tree, too). Two commits of different
    workspaces that share one file's content raced the same way. Fixed by pinblobs16: one pin
    per content, and a blob write never replaces a stored blob (``put_once``)."""
    from datahub.workspaces import commit_workspace

    ws = env.open()
    same = b"one content in every file\n" * 200
    for i in range(16):
        write(ws, f"copy{i}.txt", same)
    version = commit_workspace(ws, catalog, "copies")
    unreadable = []
    for record in catalog.list_records("copies", version.seq):
        store, key = env.stores.for_url(record.url)
        try:
            assert store.read(key, etag=record.etag) == same
        except ObjectChanged:
            unreadable.append(record.key)
    assert unreadable == [], f"{len(unreadable)} of 16 records name an etag their blob lost"


# The child of the kill -9 test: rewrites an open file past a batch of garbage (deferred, some
# off the list), closes it, leaves listed garbage of a closed file, then collects; it stops at
# ``point`` inside the collection (a pause of the real code path, never a replaced part) and
# waits there for its SIGKILL.
_GC_CHILD = """
import json, sys, threading
from datahub.config import load_config
from datahub.storage import StoreRegistry
from datahub.writeback import open_workspace
from tests.writeback.conftest import write
from tests.writeback.test_review16 import GENERATIONS, _rewrite

spec = json.loads(sys.argv[1])
config = load_config(env={}, overrides=spec["overrides"])
ws = open_workspace("ws", config, StoreRegistry(config), background=False)
fh = ws.open("ckpt", create=True)
for n in range(GENERATIONS):
    _rewrite(fh, n)
ws.flush()
fh.close()
write(ws, "other", b"o" * 12000)
write(ws, "other", b"p" * 9000)

def park(line):
    print(line, flush=True)
    threading.Event().wait()

if spec["point"] == "mid-deletes":
    delete, done = ws.chunks.delete, []
    def deleting(key):
        delete(key)
        done.append(key)
        if len(done) == 3:
            park("PARKED")
    ws.chunks.delete = deleting
else:
    journal_write = ws.journal.write
    def writing(doing):
        if doing == "garbage collection":
            park("PARKED")
        return journal_write(doing)
    ws.journal.write = writing
ws.flusher.gc()
print("NOT PARKED", flush=True)
"""


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("point", ["mid-deletes", "before-record"])
def test_a_kill_inside_a_collection_loses_no_acknowledged_file(
    tmp_path: Path, point: str, layout: str
) -> None:
    """A real process, killed -9 inside ``gc``: after some of its deletes, or after all of them
    and before the journal transaction that takes them off the list. The next open recovers,
    every acknowledged file reads back whole, nothing stays listed and only referenced objects
    stay in the shared tier."""
    import json
    import subprocess
    import sys

    from tests.writeback.conftest import make_env

    cache = {"page_size": CHUNK, "flush_interval": 3600, **LAYOUTS[layout]}
    overrides = {"home": str(tmp_path / "var"), "cache": cache}
    child = subprocess.Popen(
        [sys.executable, "-c", _GC_CHILD, json.dumps({"overrides": overrides, "point": point})],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline().strip()
        assert line == "PARKED", f"{line!r}: {child.stderr.read()[-3000:] if line == '' else ''}"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
        child.stdout.close()
        child.stderr.close()
    env = make_env(tmp_path, **LAYOUTS[layout])
    try:
        ws = env.open()
        assert _read(ws, "ckpt", SIZE + 1) == _generation(GENERATIONS - 1)
        assert _read(ws, "other", 20000) == b"p" * 9000
        ws.flush()
        assert _listed(ws) == []
        assert set(env.shared_keys()) == _referenced(ws)
    finally:
        env.close()
