"""The journal's shared log: every acknowledging journal change, in the shared tier too.

Why: the journal (LMDB) lives on the node. A file whose close returned has its bytes in the
shared tier, but only the journal names them; when the node is lost (its disk with it), those
acknowledged, unflushed files were lost for good (docs/writeback.md, "A lost node's
acknowledged files"). So each session writes, under the journal's own name,

- ``writeback-log/<workspace>/j-<id>/<epoch>/c<part>`` and ``c-end``: a *checkpoint*, the journal's namespace,
  file records, commit merge bases (``committed:``) and ``covered`` as they are when the
  session starts (after recovery), ``_CHECKPOINT_ROWS`` rows an object, ``c-end`` last (it
  makes the checkpoint whole); then the earlier sessions' objects are deleted (GC);
- ``.../<epoch>/r<n>``: one *record* per write transaction that changed any of
  those rows, numbered from 1 in commit order, holding the rows' new values (None: deleted).
  It is written before LMDB commits the same transaction (``Journal.shipper``): a
  transaction whose record did not land is not committed (the journal's contract, "commits
  durably or raises and changes nothing", holds). A record whose LMDB commit then failed is
  voided by the next number (``{"void": n}``).

New small files' first commits are not records (their close waits for the pack's or the
RADOS object's flush alone): their cover records (``packs.py``) name them, and the record of
the transaction that later writes them into LMDB carries ``covered``. Another node rebuilds
the journal from the newest whole checkpoint, the records after it up to the first missing
one, and the cover records above the last ``covered`` (``adopt.py``).

A record that could not be written makes the log incomplete: every later write transaction
of the session fails (``check``, part of the journal's fence) until the workspace is opened
again, which writes a new checkpoint.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datahub.errors import Conflict, DatahubError, NoSpace, StorageError
from datahub.writeback.chunks import ChunkStore
from datahub.writeback.journal import _ID, COVER_EPOCH, COVERED, Journal
from datahub.writeback.staged import reserve

log = logging.getLogger(__name__)
LOG_ROOT = "writeback-log"
ADOPTED = "adopted"  # ``<log prefix>/adopted``: another journal took this one's files (``adopt.py``)
MAGIC = b"DHWBLOG1"
_HEAD = struct.Struct(">II")  # body length, CRC-32 of the body
_CHECKPOINT_ROWS = 4096
COMPACT_RECORDS = 65536  # records of one base after which a new checkpoint replaces them
_END = "c-end"
_APPENDED = "log"  # a local tier's records of one base, appended to one file
# blocks a local tier's ``log`` holds past its end (about 5,000 records): a full device still
# takes the records of an unlink, a revert or a deferred commit, which free space or need none;
# it holds as much again as its checkpoint and its records, the room of the next open's
# checkpoint (``_room``, ``_release_older``)
LOG_RESERVE = 1 << 20


def log_prefix(chunks: ChunkStore) -> str:
    """Where journal ``chunks.journal``'s log lives: ``writeback-log/<workspace>/j-<id>``, the
    journal's own name (no other journal writes there) beside its chunk prefix, not in it: every
    listing of a journal's chunks (recovery's orphans, ``datahub cache journals``, the space
    count) stays a listing of chunks."""
    return f"{LOG_ROOT}/{chunks.prefix.partition('/')[2]}"


def encode(body: dict) -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    return MAGIC + _HEAD.pack(len(data), zlib.crc32(data)) + data


def decode(data: bytes) -> dict | None:
    """The object's body, or None when it is torn (short, or its CRC does not match)."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _HEAD.size:
        return None
    length, crc = _HEAD.unpack_from(data, len(MAGIC))
    body = data[len(MAGIC) + _HEAD.size :]
    if len(body) != length or zlib.crc32(body) != crc:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def row(db: str, key: bytes, value: bytes | None) -> list:
    """One row as JSON: tree keys and values are UTF-8 text, file ids numbers."""
    name: Any = _ID.unpack(key)[0] if db == "files" else key.decode()
    return [db[0], name, value.decode() if value is not None else None]


def unrow(item: list) -> tuple[str, bytes, bytes | None]:
    db = {"t": "tree", "f": "files", "m": "meta"}[item[0]]
    key = _ID.pack(item[1]) if db == "files" else item[1].encode()
    return db, key, item[2].encode() if item[2] is not None else None


@dataclass
class _Token:
    base: str
    seq: int
    future: Future = field(repr=False)


class SharedLog:
    """The writer of one session's log (``Journal.shipper``): records in commit order on one
    thread, each durable when ``landed`` returns.

    A record that fails leaves a hole: later records of that base are refused (so none is
    acknowledged past it), and the next write transaction first writes a new checkpoint under
    a new base (``check``), which makes the log whole again; until that succeeds, writes fail."""

    def __init__(self, chunks: ChunkStore, epoch: int, journal: Journal, header: dict) -> None:
        self.chunks = chunks
        self.what = chunks.what
        self.epoch = epoch
        self._journal = journal
        self._header = header
        self._gen = -1
        self.base = ""
        self._seq = 0
        self._lock = threading.Lock()  # the base, the numbers and the holes; never held during I/O
        self._resyncing = threading.Lock()
        self._holes: dict[str, int] = {}  # base -> the first record of it that failed
        self._broken: str | None = "no checkpoint yet"
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="shared-log")
        self._log_fd, self._log_base = -1, ""  # the appended records of a local tier (``_append``)
        self._log_end = self._log_reserved = 0  # its size, and the bytes of blocks it holds
        self._room = LOG_RESERVE  # bytes past the records the log holds: LOG_RESERVE + checkpoint
        # base -> (set once its checkpoint is written or failed, whether it was written): a
        # record is acknowledged only once its base's checkpoint is whole (``landed``)
        self._whole: dict[str, tuple[threading.Event, list[bool]]] = {}
        self._compactor: threading.Thread | None = None
        # the lease's fence as it is before ``attach`` adds this log's ``check`` (``landed``)
        self._held = journal.fence

    # --- Journal.shipper ---------------------------------------------------------------------------
    def ship(self, changes: dict[tuple[str, bytes], bytes | None]) -> _Token:
        rows = [row(db, key, value) for (db, key), value in changes.items()]
        with self._lock:
            self._seq += 1
            base, seq = self.base, self._seq
        data = encode({"s": seq, "w": rows})
        return _Token(base, seq, self._pool.submit(self._record, base, seq, data))

    def landed(self, token: _Token, doing: str) -> None:
        try:
            token.future.result()
            self._wait_whole(token.base)
        except Exception as exc:
            self._broken = f"record {token.seq} of its shared log was not written ({exc})"
            full = isinstance(exc, NoSpace) or getattr(exc, "errno", None) == errno.ENOSPC
            raise (NoSpace if full else StorageError)(
                f"{doing} in {self.what} was not committed: its record could not be written to the "
                f"shared tier of {self.what} ({exc}); retry once the shared tier has room and works"
            ) from exc
        # Still ours now that it landed (review20b)? The fence was asked before the record was
        # written, and a record slow to land (a stalled shared tier, a paused process) may land
        # after the lease lapsed, after another node took the lease and adopted this journal
        # from a log without it (``adopt.py``): committed and acknowledged then, the change was
        # nowhere the adopter looked, and this journal's next open is refused. Asked now, the
        # fence passes only while no other node may have read the log; when it fails, the
        # transaction is aborted and its record voided, as when LMDB's commit fails. (The
        # lease's fence alone: this runs inside the write transaction, where ``check``'s
        # checkpoint could not begin one.)
        self._held(doing)

    def _wait_whole(self, base: str) -> None:
        """Return once ``base``'s checkpoint is whole: a record after it is worth nothing to an
        adopter until then (it reads the newest whole checkpoint's base). Also starts a
        compaction when the base holds ``COMPACT_RECORDS`` records."""
        done, ok = self._whole[base]
        done.wait()
        if not ok[0]:
            raise StorageError(f"the checkpoint of the shared log of {self.what} was not written")
        if self._seq >= COMPACT_RECORDS and base == self.base:
            self._compact()

    def _compact(self) -> None:
        """A new checkpoint in the background, then the base's records go (GC within a session:
        the log holds one checkpoint plus the records since, not every record of a session)."""
        with self._lock:
            if self._compactor is not None and self._compactor.is_alive():
                return
            self._compactor = threading.Thread(
                target=self._compaction, name="shared-log-compact", daemon=True
            )
            self._compactor.start()

    def _compaction(self) -> None:
        with self._resyncing:
            try:
                self.resync()
            except Exception as exc:  # a thread's top level: the next write writes it whole again
                log.warning("%s: compacting the shared log failed: %s", self.what, exc)
                self._broken = f"its checkpoint was not written ({exc})"

    def void(self, token: _Token) -> None:
        """Record ``token.seq`` was written (or may be) but its LMDB commit failed: the next
        number says it never happened, so an adopter does not take it (if this fails too, the
        log is written whole again before the next write, as after a failed record)."""
        try:
            token.future.result()
        except Exception:
            self._broken = f"record {token.seq} of its shared log was not written"
            return  # a hole already: nothing after it is read, and the log is rewritten
        with self._lock:
            self._seq += 1
            base, seq = self.base, self._seq
        data = encode({"s": seq, "void": token.seq, "base": token.base})
        try:
            self._pool.submit(self._record, base, seq, data).result()
        except Exception as exc:
            self._broken = f"the void of record {token.seq} of its shared log failed ({exc})"

    def check(self, doing: str) -> None:
        """Part of the journal's fence: a log with a hole is written whole first (a new
        checkpoint); the write is refused while that fails."""
        if self._broken is None:
            return
        with self._resyncing:
            if self._broken is None:
                return
            try:
                self.resync()
            except Exception as exc:
                full = isinstance(exc, NoSpace) or getattr(exc, "errno", None) == errno.ENOSPC
                raise (NoSpace if full else StorageError)(
                    f"{doing} refused in {self.what}: {self._broken}, and writing its shared log "
                    f"whole again failed ({exc}); retry once the shared tier has room and works"
                ) from exc

    def resync(self) -> None:
        """A new base and its checkpoint; every later record goes there. The base is switched
        while no journal write transaction runs, and the checkpoint read from a snapshot begun
        then (``Journal.quiet_read``): every transaction whose record went to the old base is in
        it, and every later one's record is in the new base; so the old base may go once the
        checkpoint is whole, and a record of the new one counts only then (``landed``)."""
        done, ok = threading.Event(), [False]
        bases: list[str] = []

        def switch() -> None:
            with self._lock:
                self._gen += 1
                self.base = f"{log_prefix(self.chunks)}/{self.epoch:08x}-{self._gen:08x}"
                self._seq = 0
                self._whole[self.base] = (done, ok)
                bases.append(self.base)

        try:
            with self._journal.quiet_read(switch) as txn:
                self._checkpoint(bases[0], txn)
            ok[0] = True
        finally:
            done.set()
        base = bases[0]
        self._broken = None
        self._delete_older(base)

    def _checkpoint(self, base: str, txn: Any) -> None:
        """Write the shipped rows of ``txn`` (LMDB alone: deferred commits are in their cover
        records, numbered above its ``covered``), then ``c-end`` (the header and the number of
        parts).

        Room (lognext21): on a local tier the older bases' logs give back the blocks they hold
        past their records first (``_release_older``), and the new base's log then holds as much
        as this checkpoint past its end (``_room``): an open on a full device writes its
        checkpoint into the room the last session kept for it, where it failed with ENOSPC and
        the workspace could not be opened at all, not even to flush and evict what filled it."""
        self._release_older(base)
        part = written = 0
        covered = txn.meta(COVERED) or "0"
        rows: list[list] = [row("meta", COVERED.encode(), covered.encode())]
        for db, prefix in (("tree", b""), ("files", b""), ("meta", b"committed:")):
            for key, value in txn.rows(db, prefix):
                rows.append(row(db, key, value))
                if len(rows) >= _CHECKPOINT_ROWS:
                    written += self._put(f"{base}/c{part:06x}", encode({"part": part, "w": rows}))
                    part, rows = part + 1, []
        if rows:
            written += self._put(f"{base}/c{part:06x}", encode({"part": part, "w": rows}))
            part += 1
        written += self._put(f"{base}/{_END}", encode({**self._header, "epoch": self.epoch, "parts": part}))
        self._room = LOG_RESERVE + written
        self._reserve_log(base)

    def _release_older(self, base: str) -> None:
        """The blocks older bases' logs hold past their records, given back (a truncate to their
        own size): they take no record any more (``switch`` moved them to ``base``), and the room
        is for ``base``'s checkpoint. Best effort: what stays is deleted after the checkpoint."""
        root = self.chunks.local_root
        if root is None:
            return
        try:
            directories = list((root / log_prefix(self.chunks)).iterdir())
        except OSError:
            return
        for directory in directories:
            if str(directory).rstrip("/") == str(root / base):
                continue
            path = directory / _APPENDED
            try:
                os.truncate(path, path.stat().st_size)
            except OSError:
                pass  # none there, or gone meanwhile

    def _delete_older(self, base: str) -> None:
        """GC: the earlier checkpoints and records (the new checkpoint holds all they said).
        The adoption marker is kept."""
        mine = base + "/"
        for info in list(self.chunks.store.list(log_prefix(self.chunks) + "/")):
            if not info.key.startswith(mine) and not info.key.endswith("/" + ADOPTED):
                try:
                    self.chunks.store.delete(info.key)
                except DatahubError:
                    pass  # deleted at the next checkpoint
        root = self.chunks.local_root
        if root is not None:  # a local tier keeps the emptied directories of old bases
            for directory in (root / log_prefix(self.chunks)).iterdir():
                if directory.is_dir() and str(directory).rstrip("/") != str(root / base):
                    try:
                        directory.rmdir()
                    except OSError:
                        pass  # not empty (a record landing late): the next checkpoint takes it

    # --- storage -----------------------------------------------------------------------------------
    def _record(self, base: str, seq: int, data: bytes) -> None:
        """Record ``seq`` of ``base``, on the log's thread; refused after a hole in its base."""
        with self._lock:
            hole = self._holes.get(base)
        if hole is not None and hole < seq:
            raise StorageError(f"record {hole} of the shared log of {self.what} failed before this one")
        try:
            if self.chunks.local_root is None:
                self._put(f"{base}/r{seq:012x}", data)
            else:
                self._append(base, data)
        except BaseException as exc:
            with self._lock:
                self._holes[base] = min(seq, self._holes.get(base, seq))
            self._broken = f"record {seq} of its shared log was not written ({exc})"
            raise

    def _put(self, key: str, data: bytes) -> int:
        """One log object, durable when this returns (its bytes returned): on a local shared
        tier created in place (``O_EXCL``, one ``fdatasync``: the name is new, as for chunks,
        ``chunks.py``), elsewhere one atomic put."""
        root = self.chunks.local_root
        if root is None:
            self.chunks.store.put(key, data, size=len(data))
            return len(data)
        try:
            _write_new(root / key, data)
        except OSError as exc:  # one error tree (datahub/errors.py): the open's checkpoint raised it raw
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            raise (NoSpace if full else StorageError)(
                f"the shared log of {self.what} could not be written at {key} ({exc.strerror or exc}); "
                "retry once the shared tier has room and works",
                key=key,
            ) from exc
        return len(data)

    def _append(self, base: str, data: bytes) -> None:
        """On a local shared tier a session's records are appended to one file per base,
        ``<base>/log``, each followed by one ``fdatasync`` (creating a file per record cost
        the daemon a file creation each: about twice the CPU). A record cut short by a crash
        fails its CRC and ends the log there; after a failed append the base has a hole and
        takes nothing more (``_record``).

        The file holds ``LOG_RESERVE`` bytes of blocks past its end, taken at the checkpoint and
        topped up as records use them (``_reserve_log``): on a full device an unlink, the revert
        of a close refused for space, or a deferred small file's commit still gets its record.
        Without it the first record on a full device made a hole, the checkpoint that mends it
        could not be written either, and every later change, deletions too, was refused: a
        close refused for space answered EIO instead of ENOSPC and its revert never ran."""
        if self._log_base != base:
            self._close_log()
            path = self.chunks.local_root / base / _APPENDED  # type: ignore[operator]
            _make_dirs(path.parent)
            self._log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            self._log_base = base
            st = os.fstat(self._log_fd)
            self._log_end, self._log_reserved = st.st_size, st.st_blocks * 512
        view = memoryview(data)
        while view:
            view = view[os.write(self._log_fd, view) :]
        os.fdatasync(self._log_fd)
        self._log_end += len(data)
        want = self._log_end + self._room + self._log_end  # the next checkpoint holds these records' rows too
        if self._log_reserved < want - LOG_RESERVE // 2:
            self._log_reserved = max(self._log_reserved, _reserve(self._log_fd, want))

    def _reserve_log(self, base: str) -> None:
        """``_room`` bytes of blocks past ``base``'s records, taken once its checkpoint is
        written: ``LOG_RESERVE`` for the records, as much as the checkpoint for the next open's.
        Best effort: a full device, or a file system without ``fallocate``, appends as before
        (the reserve is topped up as records go, ``_append``)."""
        root = self.chunks.local_root
        if root is None:
            return
        path = root / base / _APPENDED
        try:
            _make_dirs(path.parent)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return  # the checkpoint's own writes say what is wrong, in the error tree (``_put``)
        try:
            size = os.fstat(fd).st_size
            _reserve(fd, 2 * size + self._room)
        finally:
            os.close(fd)

    def _close_log(self) -> None:
        if self._log_fd >= 0:
            os.close(self._log_fd)
        self._log_fd, self._log_base = -1, ""

    def close(self) -> None:
        compactor = self._compactor
        if compactor is not None:
            compactor.join()
        self._pool.shutdown(wait=True)
        self._close_log()


def _reserve(fd: int, upto: int) -> int:
    """The bytes of blocks ``fd``'s file holds once ``[0, upto)`` is reserved, or 0 where it
    could not be (no room, no ``fallocate``): then the appends take their blocks as they go."""
    try:
        return upto if reserve(fd, upto) else 0
    except OSError:
        return 0


def _write_new(path: Path, data: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        _make_dirs(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fdatasync(fd)
    except BaseException:
        os.unlink(path)  # never read: the record's base has a hole from now on (``_record``)
        raise
    finally:
        os.close(fd)


def _make_dirs(directory: Path) -> None:
    """Make ``directory`` (0700) and fsync each parent whose entry was added."""
    missing = []
    at = directory
    while not at.exists():
        missing.append(at)
        at = at.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            continue
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def attach(ws: Any, objects_url: str) -> None:
    """Start this session's log (``open_workspace``, after recovery, before any write): refuse
    a journal another node adopted, write the checkpoint, then ship every later transaction.
    ``ws``: the ``Workspace`` (its journal, chunk store and chunk size)."""
    journal, chunks = ws.journal, ws.chunks
    if not chunks.journal:
        return  # a journal made before journal ids has no prefix of its own to log under
    marker = _read(chunks.store, f"{log_prefix(chunks)}/{ADOPTED}")
    if marker is not None:
        raise Conflict(
            f"journal {chunks.journal} of {ws.what} was adopted by journal {marker.get('by')} on "
            f"{marker.get('host')}: its files are that journal's now, and this node's copy of it is "
            f"stale; move {journal.path.parent} aside (or delete it) and open the workspace again"
        )
    with journal.read() as txn:
        epoch = int(txn.meta(COVER_EPOCH) or 0)
        seeded = int(txn.meta("cover_seeded") or 0)  # records.COVER_SEEDED (adopt._rebuild)
        placed = int(txn.meta("cover_placed") or epoch)  # records.COVER_PLACED (adopt._rebuild)
        keyed = txn.meta("cover_keyed")  # records.COVER_KEYED (adopt._rebuild)
        key = txn.meta("cover_key")  # records.COVER_KEY: an adopter verifies the keyed records
    header = {
        "journal": chunks.journal,
        "cover_seeded": seeded,
        "cover_placed": placed,
        **({"cover_keyed": int(keyed), "cover_key": key} if keyed is not None and key else {}),
        "objects_url": objects_url,
        "chunk_size": ws.chunk_size,
        "at": time.time(),
    }
    shared = SharedLog(chunks, epoch, journal, header)
    try:
        shared.resync()
    except BaseException as exc:
        shared.close()
        if not isinstance(exc, NoSpace):
            raise
        raise NoSpace(
            f"{ws.what} cannot be opened: the checkpoint of its shared log (written at every open, "
            "so that another node can adopt its acknowledged files if this one is lost) does not fit "
            f"on its shared tier ({exc.message}). Nothing was lost: its files are in its journal and "
            "the shared tier as they were. Free room on the shared tier (`datahub cache journals`, "
            "then `datahub cache forget-journal` for retired nodes' journals; other workspaces "
            "flushed and evicted) or grow it, then open it again",
            workspace=ws.name,
        ) from exc
    fence = journal.fence

    def fenced(doing: str) -> None:
        fence(doing)
        shared.check(doing)

    journal.fence = fenced
    journal.shipper = shared


# --- reading (adopt.py) ----------------------------------------------------------------------------
@dataclass
class LogState:
    """A journal rebuilt from its log: the shipped rows, and what the rebuild was made of."""

    header: dict
    rows: dict[tuple[str, bytes], bytes]
    epoch: int
    records: int  # records applied after the checkpoint
    voided: int


def newest_header(chunks: ChunkStore) -> dict:
    """The header of journal ``chunks.journal``'s newest whole checkpoint (``{}``: no log), read
    alone: its ``cover_key`` and ``cover_keyed`` (``records.COVER_KEY``) judge the journal's
    cover records without its LMDB (`datahub cache journals` counts them)."""
    store = chunks.store
    prefix = log_prefix(chunks) + "/"
    ends = sorted((info.key for info in store.list(prefix) if info.key.endswith("/" + _END)), reverse=True)
    for end in ends:
        header = _read(store, end)
        if header is not None:
            return header
    return {}


def read_log(chunks: ChunkStore) -> LogState | None:
    """The newest whole checkpoint and its session's records up to the first missing or torn
    one, voided records left out. None: the journal has no whole checkpoint (no log: it was
    made before nodeloss20, or never opened since)."""
    store = chunks.store
    by_epoch: dict[str, set[str]] = {}
    prefix = log_prefix(chunks) + "/"
    for info in store.list(prefix):
        epoch, _, name = info.key[len(prefix) :].partition("/")
        if name:
            by_epoch.setdefault(epoch, set()).add(name)
    for epoch in sorted(by_epoch, reverse=True):
        names = by_epoch[epoch]
        if _END not in names:
            continue
        header = _read(store, f"{prefix}{epoch}/{_END}")
        if header is None:
            continue
        rows: dict[tuple[str, bytes], bytes] = {}
        for part in range(header["parts"]):
            body = _read(store, f"{prefix}{epoch}/c{part:06x}")
            if body is None:
                raise StorageError(
                    f"part {part} of the shared log checkpoint {epoch} of {chunks.what} is missing or "
                    "torn; the journal cannot be rebuilt from the shared tier"
                )
            _apply(rows, body["w"])
        base = f"{prefix}{epoch}"
        records = list(_records(store, base + "/", names))
        voided = {body["void"] for body in records if "void" in body and body.get("base") == base}
        applied = 0
        for body in records:
            if "w" in body and body["s"] not in voided:
                _apply(rows, body["w"])
                applied += 1
        return LogState(header, rows, int(epoch.partition("-")[0], 16), applied, len(voided))
    return None


def _records(store: Any, base: str, names: set[str]) -> Iterator[dict]:
    """A base's records in order, up to the first missing or torn one (the appended file on a
    local tier, else one object each)."""
    if _APPENDED in names:
        try:
            data = store.read(base + _APPENDED)
        except DatahubError:
            return
        seq, at = 1, 0
        while at < len(data):
            if data[at : at + len(MAGIC)] != MAGIC or at + len(MAGIC) + _HEAD.size > len(data):
                return
            length, _crc = _HEAD.unpack_from(data, at + len(MAGIC))
            end = at + len(MAGIC) + _HEAD.size + length
            body = decode(data[at:end])
            if body is None or body.get("s") != seq:
                return  # torn: never acknowledged, and nothing after it was
            yield body
            seq, at = seq + 1, end
        return
    seq = 1
    while f"r{seq:012x}" in names:
        body = _read(store, f"{base}r{seq:012x}")
        if body is None:  # torn: its transaction was never acknowledged, and nothing came after
            return
        yield body
        seq += 1


def _apply(rows: dict[tuple[str, bytes], bytes], items: list) -> None:
    for item in items:
        db, key, value = unrow(item)
        if value is None:
            rows.pop((db, key), None)
        else:
            rows[(db, key)] = value


def _read(store: Any, key: str) -> dict | None:
    try:
        return decode(store.read(key))
    except DatahubError:
        return None
