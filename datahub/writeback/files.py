"""Open files of a workspace: a small page cache over immutable chunk objects.

All handles of one file share one ``OpenFile`` (so a write through one handle is visible
through another, as in POSIX). Its state:

- ``chunks``: index -> (shared-tier key, length) — the committed chunk map, plus chunks
  already uploaded ahead of an fsync (``staged``, not yet referenced by the journal);
- ``buffers``: index -> bytes of chunks modified since their last upload (``dirty``),
  or kept as read cache; bounded by ``buffer_bytes``: past it, full dirty chunks are
  uploaded early (write-behind) and clean buffers dropped. A buffer is a ``bytearray``, or
  from 1 MiB on a ``ChunkBuffer`` (``datahub.aligned_buffers``): reused memory, which a local
  shared tier's chunk file ``O_DIRECT`` write and an S3/RGW PUT take without a copy.

``_lock`` guards only memory and is never held during I/O. ``_commit_lock`` serialises the
fsyncs of one file (upload + journal commit) and the reverts of it (``commits_held``), and
is held by nothing else, so reads and writes never wait for the network. A per-chunk
version counter tells an upload whether its chunk was written again meanwhile (then it
stays dirty).

An fsync commits the file as it was at one instant after it was called (wbreview44): under
``_lock``, once the write-behind uploads started before it was called have landed (never
later ones, which a busy writer of the file starts without end: wbreview71), it takes the
size, the stored chunks and a copy of every dirty chunk (from an upload still in flight,
its bytes); what changes after that instant stays to commit. So its
uploads are committed even if the chunk was written (or cut) again meanwhile, and it
clears only what it committed: a staged chunk whose key is the one it committed, and the
"size changed" mark only if no write or truncate came since (``changes``, a counter every
change bumps).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager

from datahub.aligned_buffers import ChunkBuffer
from datahub.errors import DatahubError, InvalidInput, NoSpace
from datahub.writeback.model import FileAttr, FileSettings
from datahub.writeback.ports import Committer, NotFresh, Uploader

# A chunk buffer of this many bytes or more is a ``ChunkBuffer``: on a local shared tier such a
# chunk is a file of its own written with ``O_DIRECT`` (``packs.PACK_CHUNK_MAX``: smaller ones
# go to packs); smaller buffers stay bytearrays, a huge page being 20x a 100 KB file (perf41c).
# On RADOS and S3/RGW too (perf41f): a ``bytearray`` grown 1 MiB WRITE by WRITE to a 4 MiB
# chunk was new memory for every chunk (its pages faulted in, and realloc'ed as it grew), and
# with 4 writers the daemon's minor faults per MiB rose from 4-46 to 86-191, its kernel CPU with them; a
# ``ChunkBuffer`` comes from a pool of kept mappings (``aligned_buffers._POOL``).
PROMOTE = 1 << 20


class OpenFile:
    """One file's buffers; it uploads through ``uploads`` and commits through ``commits``
    (``ports.py``) and knows nothing else of the workspace."""

    def __init__(
        self, uploads: Uploader, commits: Committer, conf: FileSettings, file_id: int, path: str, rec: dict
    ) -> None:
        self.uploads = uploads
        self.commits = commits
        self.settings = conf
        self.id = file_id
        self.path = path  # for messages; follows renames
        self.cs = conf.chunk_size
        self.refs = 0
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # an upload in flight finished
        self.uploading: set[int] = set()
        self.inflight: dict[int, Buffer] = {}  # chunk bytes being uploaded (write-behind)
        # write-behind uploads started so far, and the number of each one in flight (by chunk):
        # an fsync waits only for those started before it was called (``_wait_uploads``)
        self.uploads_started = 0
        self._upload_number: dict[int, int] = {}
        self.size: int = rec["size"]
        self.mtime: float = rec["mtime"]
        self.mode: int = rec["mode"]
        self.gen: int = rec["gen"]
        self.chunks: dict[int, tuple[str, int]] = {int(i): (k, n) for i, (k, n) in rec["chunks"].items()}
        self.committed: dict[int, tuple[str, int]] = dict(self.chunks)
        self.committed_size = self.size
        self.staged: set[int] = set()
        self.buffers: dict[int, Buffer] = {}
        # chunks of PROMOTE bytes and up: their buffers become ChunkBuffers (``_promote``),
        # written with O_DIRECT from the buffer itself on a local shared tier, sent from it to
        # S3/RGW, copied once into the bytes a RADOS write op takes
        self._direct = self.cs >= PROMOTE
        self.dirty: set[int] = set()
        self.version: dict[int, int] = {}
        self.changes = 0  # bumped by every write and truncate: what a commit's snapshot saw (``_committed``)
        self.meta_dirty = False  # size/mtime changed without a chunk change (truncate)
        self.pending = False  # created but not yet in the journal (the first fsync writes it)
        # journaled empty by a namespace operation, never acknowledged: the next fsync or
        # close commits it even unchanged, as the acknowledgement a revert then keeps
        self.unacked: bool = bool(rec.get("unacked"))
        self.unlinked = False  # removed from the namespace while open (its record is dropped at last close)
        self.dropped = False  # never acknowledged and dropped at a close that failed for space (``drop``)
        self.created = self.mtime
        self.discard: list[str] = []  # staged keys replaced before any commit referenced them

    def attr(self) -> tuple[int, float]:
        """(size, mtime) now, unacknowledged writes included."""
        return self.size, self.mtime

    def closed(self) -> None:
        """The last handle is gone (``staged.StagedFile`` lets its staged file go here)."""

    # --- reading -------------------------------------------------------------------------------
    def _stored(self, index: int, key_len: tuple[str, int] | None) -> bytes:
        if key_len is None:
            return b""
        return self.uploads.chunks.get(key_len[0], key_len[1], self.path)

    def _chunk_view(self, index: int) -> bytes | bytearray:
        """Current bytes of one chunk (possibly shorter than the chunk: the rest is zeros)."""
        while True:
            with self._lock:
                buf = self.buffers.get(index)
                if buf is None:
                    buf = self.inflight.get(index)
                if buf is not None:
                    return bytes(buf)
                key_len = self.chunks.get(index)
            data = self._load(index, key_len)
            if data is not None:
                return data

    def _load(self, index: int, key_len: tuple[str, int] | None) -> bytes | None:
        """The stored bytes of chunk ``index`` under ``key_len``, read without ``_lock``; None
        if that read failed because the chunk changed meanwhile (the caller looks again).

        Why (wbreview24): a staged chunk replaced by a newer upload is deleted at the next
        commit (``discard``), so a read that took its key just before found it gone: the
        READ failed with EIO beside another handle's write and fsync, on every shared tier
        where a chunk is an object of its own (S3, RADOS, 1 MiB chunks and up on a disk)."""
        try:
            return self._stored(index, key_len)
        except DatahubError:
            with self._lock:
                if (
                    self.chunks.get(index) == key_len
                    and index not in self.buffers
                    and index not in self.inflight
                ):
                    raise  # the chunk is still that one: its read failed for good
            return None

    def read(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0:
            raise InvalidInput(f"read of {self.path!r}: negative offset or size")
        with self._lock:
            end = min(offset + size, self.size)
        if offset >= end:
            return b""
        out = bytearray()
        pos = offset
        while pos < end:
            index, within = divmod(pos, self.cs)
            take = min(self.cs - within, end - pos)
            data = self._chunk_view(index)[within : within + take]
            out += data
            if len(data) < take:
                out += bytes(take - len(data))
            pos += take
        return bytes(out)

    # --- writing -------------------------------------------------------------------------------
    def _buffer(self, index: int, covers_all: bool) -> Buffer:
        """The writable buffer of chunk ``index`` (caller holds ``_lock``; may release it to load)."""
        buf = self.buffers.get(index)
        if buf is not None:
            return buf
        uploading = self.inflight.get(index)
        if uploading is not None:  # copy-on-write: the upload keeps the bytes it started with
            buf = self.buffers[index] = bytearray() if covers_all else self._copy(uploading)
            return buf
        key_len = self.chunks.get(index)
        if key_len is None or covers_all:
            buf = bytearray()
        else:
            self._lock.release()
            try:
                data = self._load(index, key_len)
            finally:
                self._lock.acquire()
            if data is None:  # replaced while read: see what the chunk is now
                return self._buffer(index, covers_all)
            buf = self.buffers.get(index)  # another writer may have loaded it meanwhile
            if buf is not None:
                return buf
            # or loaded it, wrote it full and handed it to a write-behind upload (``inflight``),
            # or uploaded it: ``data`` is then older than the chunk, and a buffer of it dropped
            # that writer's bytes (wbreview24, tests/writeback/test_wbreview24.py)
            if index in self.inflight or self.chunks.get(index) != key_len:
                return self._buffer(index, covers_all)
            buf = self._copy(data)
        self.buffers[index] = buf
        return buf

    def _copy(self, data: bytes | Buffer) -> Buffer:
        """A new buffer holding ``data``: a ``ChunkBuffer`` where ``_promote`` would make one."""
        if isinstance(data, ChunkBuffer) or (self._direct and len(data) >= PROMOTE):
            return ChunkBuffer.of(data, self.cs)
        return bytearray(data)

    def _promote(self, index: int, buf: Buffer, end: int) -> Buffer:
        """Chunk ``index``'s buffer, a ``ChunkBuffer`` once a write makes it ``PROMOTE`` bytes
        or more (``end``), for chunks of ``PROMOTE`` bytes and up (caller holds ``_lock``)."""
        if isinstance(buf, ChunkBuffer) or not self._direct or max(len(buf), end) < PROMOTE:
            return buf
        buf = self.buffers[index] = ChunkBuffer.of(buf, self.cs)
        return buf

    def _touch(self, index: int) -> None:
        self.dirty.add(index)
        self.version[index] = self.version.get(index, 0) + 1
        self.changes += 1

    def committed_now(self) -> bool:
        """Whether ``fsync`` would return at once with nothing to do: no commit running (its
        lock is free now, not waited for), nothing dirty, uploading, staged or pending. The
        FUSE layer answers such a FLUSH (a close after an fsync, a reader's close) on its
        request loop: the file's contents are durable and journaled already."""
        if not self._commit_lock.acquire(blocking=False):
            return False
        try:
            with self._lock:
                return not (
                    self.dirty
                    or self.uploading
                    or self.staged
                    or self.meta_dirty
                    or self.discard
                    or self.pending
                    or self.unacked
                )
        finally:
            self._commit_lock.release()

    def writes_in_memory(self, offset: int, length: int) -> bool:
        """Whether ``write(offset, <length bytes>)`` would only copy into a buffer now: one
        chunk, and if it fills that chunk, an upload slot free (the write-behind upload is
        handed to the pool, never waited for), no stored chunk to load first, the buffer
        budget kept (no write-behind). The FUSE layer answers such a WRITE on its request
        loop instead of hopping to a worker thread; another thread changing the file in
        between can only make that write do its I/O or wait there.

        Why the filling write too (bigwrites20): a file written in 1 MiB calls fills a 4 MiB
        chunk every fourth WRITE, and that hop was a quarter of its WRITEs' thread hand-offs."""
        if offset < 0 or length <= 0:
            return False
        index, within = divmod(offset, self.cs)
        end = within + length
        if end > self.cs:
            return False
        with self._lock:
            buf = self.buffers.get(index)
            if buf is None and index in self.chunks and index not in self.inflight:
                return False  # a partial write into a stored chunk loads it from the shared tier
            have = len(buf) if buf is not None else 0
            if max(have, end) == self.cs and (
                len(self.uploading) >= self.settings.max_inflight or index in self.uploading
            ):
                return False  # the chunk it fills would wait for an upload slot
            growth = max(have, end) - have
            return self._buffered_bytes_locked() + growth <= self.settings.buffer_bytes

    def write(self, offset: int, data: bytes, *, short: bool = False) -> int:
        """Every byte of ``data``, or an error. ``short``: the caller takes a count of fewer
        bytes (a ``write(2)``'s answer); only a staged file gives one (``StagedFile.write``)."""
        if offset < 0:
            raise InvalidInput(f"write to {self.path!r}: negative offset {offset}")
        view = memoryview(data)
        pos = offset
        full: list[int] = []
        while view:
            index, within = divmod(pos, self.cs)
            take = min(self.cs - within, len(view))
            with self._lock:
                chunk_end = min(self.cs, max(self.size - index * self.cs, 0))
                buf = self._buffer(index, covers_all=within == 0 and take >= chunk_end)
                buf = self._promote(index, buf, within + take)
                if len(buf) < within:
                    buf.extend(bytes(within - len(buf)))  # sparse: a hole reads as zeros
                _put(buf, within, view[:take])
                self._touch(index)
                self.size = max(self.size, pos + take)
                self.mtime = self.settings.clock()
                if len(buf) == self.cs:
                    full.append(index)
            view = view[take:]
            pos += take
        for index in full:
            self._start_upload(index)
        if self._buffered_bytes() > self.settings.buffer_bytes:
            self._write_behind()
        return len(data)

    def truncate(self, size: int) -> None:
        if size < 0:
            raise InvalidInput(f"truncate of {self.path!r}: negative size {size}")
        with self._lock:
            if size < self.size:
                index, within = divmod(size, self.cs)
                doomed = [
                    i
                    for i in set(self.buffers) | set(self.chunks) | set(self.inflight)
                    if i > index or (i == index and not within)
                ]
                for i in doomed:
                    self.buffers.pop(i, None)
                    self.inflight.pop(i, None)
                    self.dirty.discard(i)
                    # an upload of it in flight (an fsync's, write-behind) now holds bytes it no
                    # longer has: neither may install it (``_install``, ``_install_committed``)
                    self.version[i] = self.version.get(i, 0) + 1
                    key_len = self.chunks.pop(i, None)
                    if key_len is not None and i in self.staged:
                        self.staged.discard(i)
                        self.discard.append(key_len[0])
                if within and (index in self.buffers or index in self.chunks or index in self.inflight):
                    buf = self._buffer(index, covers_all=False)
                    del buf[within:]
                    self._touch(index)
            self.size = size
            self.mtime = self.settings.clock()
            self.meta_dirty = True
            self.changes += 1  # a commit running now took the size before it: it stays to commit

    # --- uploads -------------------------------------------------------------------------------
    def _buffered_bytes(self) -> int:
        with self._lock:
            return sum(len(b) for b in self.buffers.values())

    def _upload(self, indices: set[int]) -> None:
        """Upload the current contents of dirty chunks; re-dirtied chunks stay dirty."""
        with self._lock:
            todo = [(i, bytes(self.buffers[i]), self.version.get(i, 0)) for i in indices if i in self.buffers]
        results = self.uploads.upload_many(self.id, self.path, todo)
        with self._lock:
            for (index, data, version), key in zip(todo, results, strict=True):
                self._install(index, version, key, len(data))

    def _install(self, index: int, version: int, key: str, length: int) -> None:
        """An upload of chunk ``index`` at ``version`` finished (caller holds ``_lock``)."""
        if self.version.get(index, 0) != version or index not in self.dirty:
            self.discard.append(key)  # written again (or truncated) meanwhile: stays dirty
            return
        old = self.chunks.get(index)
        if old is not None and index in self.staged:
            self.discard.append(old[0])
        self.chunks[index] = (key, length)
        self.staged.add(index)
        self.dirty.discard(index)

    def _start_upload(self, index: int) -> None:
        """Write-behind: a full dirty chunk starts uploading while the writer goes on.

        At most ``settings.max_inflight`` uploads per file are in flight (each holds a copy of
        its chunk); past that the writer waits, which bounds the memory in bytes.
        """
        with self._lock:
            while len(self.uploading) >= self.settings.max_inflight:
                self._idle.wait()
            buf = self.buffers.get(index)
            if index not in self.dirty or index in self.uploading or buf is None or len(buf) != self.cs:
                return
            # hand the buffer itself to the upload (no copy); a later write copies it first
            data, version = self.buffers.pop(index), self.version.get(index, 0)
            self.inflight[index] = data
            self.uploading.add(index)
            self.uploads_started += 1
            self._upload_number[index] = self.uploads_started
        future = self.uploads.submit_upload(self.id, index, data, self.path)
        future.add_done_callback(lambda f: self._uploaded(f, index, version, data))

    def _uploaded(self, future: Future, index: int, version: int, data: Buffer) -> None:
        late: list[str] = []
        with self._lock:
            self.uploading.discard(index)
            self._upload_number.pop(index, None)
            if self.inflight.get(index) is data:
                del self.inflight[index]
            self._idle.notify_all()
            if future.exception() is not None:
                if index in self.dirty:
                    self.buffers.setdefault(index, data)  # keep the bytes: fsync retries them
                return
            self._install(index, version, future.result(), len(data))
            # the clean chunk now lives in the shared tier only: RAM stays small
            if self.dropped:  # removed by a revert while it ran: no commit takes its garbage
                late, self.discard = self.discard, []
        if late:
            self.uploads.delete_unreferenced(late)

    def _started_now(self) -> int:
        """How many write-behind uploads of this file have started (``_wait_uploads``)."""
        with self._lock:
            return self.uploads_started

    def _wait_uploads(self, started: int | None = None) -> None:
        """Until no write-behind upload is in flight, or (``started``) none of the first
        ``started`` uploads of this file (``uploads_started`` when the caller began).

        Why the bound (wbreview71): an fsync that waited for *no* upload in flight never
        returned while another handle kept writing the file (each write filling a chunk starts
        an upload, so one was almost always in flight); it needs only the uploads of what was
        written before it, and ``_snapshot`` copies the bytes of any upload started since. A
        revert (``_back_to``, ``drop``) likewise: ``_reset`` makes a later one garbage."""
        with self._lock:
            if started is None:
                while self.uploading:
                    self._idle.wait()
                return
            while any(n <= started for n in self._upload_number.values()):
                self._idle.wait()

    def _write_behind(self) -> None:
        """Past the RAM budget: upload full dirty chunks now and drop clean buffers."""
        with self._lock:
            full = {i for i in self.dirty if len(self.buffers.get(i, b"")) == self.cs}
        if full:
            self._upload(full)
        with self._lock:
            for i in [i for i in self.buffers if i not in self.dirty]:
                del self.buffers[i]

    def fsync(self) -> None:
        """Durable in the shared tier and committed to the journal before returning.

        A file that was never journaled (``pending``) has no durable state a crash could
        damage, so its chunk uploads and its journal commit run at the same time
        (``_commit_overlapped``). Every other file uploads first and commits after, so a
        crash at any point leaves its older acknowledged contents whole.
        """
        with self._commit_lock:
            if self.dropped:
                raise self.gone()
            with self._lock:
                pending = set(self.dirty)
                changed = bool(
                    pending or self.staged or self.meta_dirty or self.discard or self.pending or self.unacked
                )
                started = self.uploads_started
            if not changed:
                return
            self._wait_uploads(started)  # those of writes before this call; never later ones
            if self.pending and self.dirty and self._commit_overlapped():
                return
            with self._lock:
                todo, chunk_map, size, mtime, changes = self._snapshot()
            keys = self.uploads.upload_many(self.id, self.path, todo) if todo else []
            landed = [
                (i, version, key, len(data)) for (i, data, version), key in zip(todo, keys, strict=True)
            ]
            chunk_map.update({i: (key, length) for i, _, key, length in landed})
            try:
                gen = self.commits.commit_file(self.id, self.path, size, mtime, chunk_map)
            except BaseException:
                with self._lock:  # uploaded, not journaled: staged, so a retry only commits them
                    for index, version, key, length in landed:
                        self._install(index, version, key, length)
                raise
            with self._lock:
                for index, version, key, length in landed:
                    self._install_committed(index, version, key, length)
            self._committed(gen, chunk_map, size, changes)

    @contextmanager
    def commits_held(self) -> Iterator[None]:
        """No fsync or close of this file commits while this is held; ``revert``, ``forsake``
        and ``drop`` are called under it.

        Why: ``Workspace.revert`` reads the file's journal record, decides from it, then
        removes the file or puts it back; a commit of another handle in between returns 0
        and would then be undone (revert13). Under this the three are one step with
        respect to the file's commits."""
        with self._commit_lock:
            yield

    def revert(self, rec: dict) -> None:
        """Back to ``rec``, the journal's record of this file (its last acknowledged state):
        every change since is dropped, and the chunks only those changes named are deleted.

        Why: a close that failed for space must not commit the file half-written, neither
        then nor later, yet must not lose what an earlier fsync or close acknowledged
        (docs/writeback.md, "Out of space at close"). Afterwards the file reads as ``rec``
        and an fsync has nothing to commit. The caller holds ``commits_held`` since it read
        ``rec``.
        """
        self._back_to(rec, removed=False)

    def forsake(self, rec: dict) -> None:
        """Like ``drop``, for a file the journal holds with nothing of it acknowledged
        (``rec``: unacked or untrusted), which ``Workspace.revert`` has just unlinked: every
        change since ``rec`` is dropped, with no write into the staged file, and no commit
        can take the file any more (``gone``); the unlinked record goes at its last close.
        The caller holds ``commits_held`` since it read ``rec``.

        Why: otherwise its handles' closes commit the refused bytes again (into the
        unlinked record) and a staged file's release fails for space like the close did,
        keeping it open until the unmount, whose commit of open files then fails too.
        """
        self._back_to(rec, removed=True)

    def _back_to(self, rec: dict, *, removed: bool) -> None:
        chunks = {int(i): (k, n) for i, (k, n) in rec["chunks"].items()}
        self._wait_uploads(self._started_now())  # later ones land as garbage (``_reset``)
        if not removed:
            self._restore(rec["size"], rec["mtime"], chunks)
        with self._lock:
            dropped = self._reset(chunks, rec["size"], rec["mtime"], rec["gen"])
            self.dropped = self.dropped or removed
        self.uploads.delete_unreferenced(dropped)

    def drop(self, leave_overlay: Callable[[], bool]) -> bool:
        """Drop a created file nothing of which was acknowledged (``pending``): its bytes go,
        with every chunk it uploaded, and no commit can take it any more: a later write,
        truncate or fsync raises NoSpace (``gone``). ``leave_overlay`` takes its path out of
        the namespace's overlay (``Overlay.drop_pending``); False if the file is no longer
        pending (a commit journaled it meanwhile: revert it to that record instead).

        Why: its close failed for space, and nothing may commit it later (docs/writeback.md,
        "Out of space at close"). It has no journal record, so this needs no journal write:
        it works on a full journal device, where unlinking it would fail like its commit.
        The caller holds ``commits_held``.
        """
        if not self.pending or not leave_overlay():
            return False
        self._wait_uploads(self._started_now())  # later ones land as garbage (``_reset``)
        with self._lock:
            dropped = self._reset({}, 0, self.created, self.gen)
            self.dropped = True
        self.uploads.delete_unreferenced(dropped)
        return True

    def gone(self) -> NoSpace:
        """The error of a write, truncate or fsync of a dropped file (``drop``)."""
        return NoSpace(
            f"{self.path!r} was removed when a close of it failed for space before anything of it "
            "was acknowledged; nothing written to it is kept (create it again)",
            path=self.path,
        )

    def _reset(self, chunks: dict[int, tuple[str, int]], size: int, mtime: float, gen: int) -> list[str]:
        """Forget every change since the state (chunks, size, mtime, gen); holds ``_lock``.
        Returns the keys of the chunks only the forgotten changes named."""
        kept = {key for key, _ in chunks.values()}
        dropped = [key for key, _ in self.chunks.values() if key not in kept]
        dropped += [key for key in self.discard if key not in kept]
        self.chunks, self.committed = chunks, dict(chunks)
        self.size = self.committed_size = size
        self.mtime, self.gen = mtime, gen
        for index in self.dirty | set(self.buffers) | set(self.inflight):
            self.version[index] = self.version.get(index, 0) + 1
        self.dirty.clear()
        self.buffers.clear()
        # uploads still running (started after the revert began waiting): forgotten changes,
        # read nowhere now, never copied into a new buffer; each lands as garbage (``_uploaded``)
        self.inflight.clear()
        self.staged.clear()
        self.discard = []
        self.meta_dirty = False
        return dropped

    def _restore(self, size: int, mtime: float, chunks: dict[int, tuple[str, int]]) -> None:
        """Hook of ``revert`` (holds the commit lock): a staged file rewrites its bytes."""

    def _snapshot(self) -> tuple[list[tuple[int, bytes, int]], dict, int, float, int]:
        """The file as it is now, for a commit (holds ``_lock``): (each dirty chunk's index,
        a copy of its bytes and its version; the map of the other chunks; size; mtime;
        ``changes``). A dirty chunk whose write-behind upload is in flight (started after the
        fsync waited for the uploads before it) is copied from that upload's bytes, which no
        write changes (a write copies them into a new buffer first): the fsync uploads its own
        copy, and whichever upload lands second is garbage (``_install``,
        ``_install_committed``).

        Why one instant (wbreview44): the chunks to upload, the map and the size were taken
        at three moments, with writes and truncates of other handles between them. A chunk
        whose write-behind upload began after the fsync waited for uploads was left out of its
        uploads (its buffer was gone), and one written or cut again during the fsync's upload
        had that upload thrown away: either way the fsync committed the chunk's older journaled
        object and returned 0 without the writes made before it, next to the new size when a
        truncate had cut the chunk (whose bytes past the cut came back when the file grew).

        Why not wait for every upload in flight first, as wbreview44 did (wbreview71): a writer
        that kept filling chunks through another handle kept one in flight, and the fsync
        never returned."""
        last = (self.size + self.cs - 1) // self.cs
        todo = []
        for i in sorted(self.dirty):
            held = self.buffers.get(i)
            if held is None:
                held = self.inflight.get(i)
            if i < last and held is not None:
                todo.append((i, bytes(held), self.version.get(i, 0)))
        chunk_map = {i: kl for i, kl in self.chunks.items() if i < last and i not in self.dirty}
        for i in self.dirty:  # never without bytes in memory; its stored bytes if it were
            if i < last and i not in self.buffers and i not in self.inflight and i in self.chunks:
                chunk_map[i] = self.chunks[i]
        return todo, chunk_map, self.size, self.mtime, self.changes

    def _committed(self, gen: int, chunk_map: dict, size: int, changes: int) -> None:
        """Bookkeeping after a successful commit of ``chunk_map`` (and ``size``), taken when the
        file's ``changes`` counter was ``changes``.

        Only what the commit holds is clean now (wbreview44): a staged chunk stays staged
        unless its key is the one committed (write-behind may have uploaded it again while the
        journal committed: before, the commit took it off ``staged`` all the same, and the
        close after it committed nothing, leaving the journal on the older bytes), and the
        size stays to commit if a write or truncate came since the snapshot (before, a
        truncate during the commit was forgotten: the close after it returned 0 with the old
        size journaled)."""
        self.gen = gen
        self.unacked = False
        referenced = {key for key, _ in chunk_map.values()}
        with self._lock:
            self.committed = chunk_map
            self.committed_size = size
            self.staged = {i for i in self.staged if self.chunks.get(i) != chunk_map.get(i)}
            if self.changes == changes:
                self.meta_dirty = False
            # a key the commit names stays (a truncate may have dropped it meanwhile): the
            # next commit that leaves it out turns it into journaled garbage
            discard = [key for key in self.discard if key not in referenced]
            self.discard = []
            if self._buffered_bytes_locked() > self.settings.buffer_bytes:
                for i in [i for i in self.buffers if i not in self.dirty]:
                    del self.buffers[i]
        self.uploads.delete_unreferenced(discard)

    def _commit_overlapped(self) -> bool:
        """First commit of a new file: upload its dirty chunks *while* its record commits.

        The record names the chunks before they are durable, so it is committed
        ``unverified`` with each such chunk's length and fingerprint: if we crash before the
        uploads finish, recovery finds a chunk missing or torn and drops the file, which is
        allowed, as this fsync never returned. We return only once both are durable; then
        the workspace trusts that generation (the flusher uploads only trusted files) and
        the flag is cleared lazily by the next transaction that rewrites the record.

        False (nothing committed, try the sequential way) when a namespace operation is
        running or waiting, or it already wrote the file into the journal: namespace
        transactions never see a record whose chunks may be missing (a rename over an
        acknowledged file must not depend on an upload that may never land).

        A file of one chunk gets its key from ``first_key``: in a pack, its record is written
        beside the chunk (``commit.trailer``) so the journal commit can skip a flush.
        """
        if not self.commits.begin_overlap():
            return False
        try:
            if not self.pending:
                return False
            cover = None
            with self._lock:
                todo, chunk_map, size, mtime, changes = self._snapshot()
                if not todo:
                    return False
                if len(todo) == 1 and todo[0][0] == 0 and size <= self.cs:  # a one-chunk file
                    key, cover = self.commits.first_key(self.id, self.path, size, mtime, todo[0][1])
                    keys = [key]
                else:
                    keys = self._new_keys([(i, len(data)) for i, data, _ in todo])
                chunk_map.update({i: (key, len(data)) for (i, data, _), key in zip(todo, keys, strict=True)})
            # the commit goes to the pool and the first chunk is written here: the chunk write
            # (a create + fsync) is the longer step, so it starts without a thread hand-off
            written = [(key, data) for (_, data, _), key in zip(todo, keys, strict=True)]
            try:
                commit = self.commits.submit_commit(
                    self.id, self.path, size, mtime, chunk_map, written, cover
                )
            except BaseException:
                self.uploads.chunks.abandon(keys)  # no record names them, no write began
                raise
            futures: list[Future | _Ran] = [
                self.uploads.submit_write(key, data, self.path)
                for (_, data, _), key in zip(todo[1:], keys[1:], strict=True)
            ]
            first = todo[0][1]
            futures.insert(0, _run_here(self.uploads.chunks.write, keys[0], first, self.path, commit.trailer))
            try:
                gen = commit.result()
            except NotFresh:
                self._settle_uploads(todo, keys, futures, committed=False)
                return False
            except BaseException:
                self._settle_uploads(todo, keys, futures, committed=False)
                raise
            error = self._settle_uploads(todo, keys, futures, committed=True)
            if error is None:
                try:  # still ours now that everything landed (``Committer.still_held``)
                    self.commits.still_held(f"fsync of {self.path!r}")
                except Exception as exc:
                    error = exc
            if error is not None:
                self.commits.undo_fresh(self, gen)
                raise error
            self.commits.trust(self.id, gen)
            self._committed(gen, chunk_map, size, changes)
            return True
        finally:
            self.commits.end_overlap()

    def _new_keys(self, chunks: list[tuple[int, int]]) -> list[str]:
        """A fresh key for each (index, length) of ``chunks``, or none: a small chunk's key
        reserves its place in a pack (``ChunkStore.new_key``), which holds the pack open and
        linked until it is written or abandoned, so when a later reservation fails (no space,
        no descriptor for the next pack) the ones made before it are abandoned (fix21)."""
        keys: list[str] = []
        try:
            for index, length in chunks:
                keys.append(self.uploads.chunks.new_key(self.id, index, length, self.path))
        except BaseException:
            self.uploads.chunks.abandon(keys)
            raise
        return keys

    def _settle_uploads(
        self,
        todo: list[tuple[int, bytes, int]],
        keys: list[str],
        futures: list[Future | _Ran],
        committed: bool,
    ) -> BaseException | None:
        """Wait for every upload started alongside a commit; returns the first error.

        If the commit succeeded and every upload too, the chunks are the committed ones;
        otherwise the uploaded chunks are only staged (the journal does not count on them)
        and a chunk whose upload failed stays dirty, its bytes still in its buffer.
        """
        error: BaseException | None = None
        done = []
        for (index, data, version), key, future in zip(todo, keys, futures, strict=True):
            try:
                future.result()
            except BaseException as exc:  # collect them all: no upload may run on after we return
                error = error or exc
            else:
                done.append((index, version, key, len(data)))
        with self._lock:
            for index, version, key, length in done:
                if committed and error is None:
                    self._install_committed(index, version, key, length)
                else:
                    self._install(index, version, key, length)
        return error

    def _install_committed(self, index: int, version: int, key: str, length: int) -> None:
        """A chunk the journal names now has landed: the bytes chunk ``index`` had at
        ``version`` (caller holds ``_lock``).

        Unchanged since (the same version; a truncate that drops a chunk bumps it too), it is
        the chunk's object now: clean, and any other upload of the same bytes (a write-behind
        that raced the fsync's copy) is garbage. Written or cut again meanwhile, it stays dirty,
        its newer bytes in its buffer, and this key, the journal's, is its stored object until
        the next commit replaces it. Dropped by a truncate, or uploaded again by write-behind
        (staged), it is left as it is: the next commit replaces the key in the journal."""
        changed = self.version.get(index, 0) != version
        if changed and index not in self.dirty:
            return
        old = self.chunks.get(index)
        if old is not None and index in self.staged and old[0] != key:
            self.discard.append(old[0])
        self.chunks[index] = (key, length)
        self.staged.discard(index)
        if not changed:
            self.dirty.discard(index)

    def _buffered_bytes_locked(self) -> int:
        return sum(len(b) for b in self.buffers.values())


Buffer = bytearray | ChunkBuffer  # a chunk's bytes in memory (``OpenFile.buffers``)


def _put(buf: Buffer, at: int, piece: memoryview) -> None:
    """``buf[at : at + len(piece)] = piece`` with one copy of the bytes (``at <= len(buf)``).

    Why not that slice assignment (perf41b): CPython's bytearray copies a value that is not a
    bytearray (a WRITE's ``bytes``, a memoryview of them) into a temporary bytearray first,
    then copies that in, so every byte written through a mount was copied twice here: 6.5 %
    of the daemon's CPU for 16 MiB files, and a transient second copy of each write in
    memory. The part inside the buffer is copied through a memoryview of it (released before
    the buffer may grow), the rest appended with ``extend``; both copy from ``piece``'s own
    buffer once. A memoryview of another byte format ('b', 'c') takes the slice assignment:
    a memoryview copies only between views of one format. A ``ChunkBuffer`` copies once too."""
    if isinstance(buf, ChunkBuffer):
        buf.put(at, piece)
        return
    if piece.format != "B":
        buf[at : at + len(piece)] = piece
        return
    inside = min(len(buf) - at, len(piece))
    if inside > 0:
        with memoryview(buf) as whole, piece[:inside] as head:
            whole[at : at + inside] = head
    if inside < len(piece):
        with piece[max(inside, 0) :] as tail:
            buf.extend(tail)


class _Ran:
    """The outcome of a call run in this thread, read as a finished pool task's (``result``).
    Why not a ``Future`` (small41c): one is built per small file's close, and a Future makes a
    ``threading.Condition`` (an RLock, a deque) and notifies it at ``set_result``: 3-4 µs of
    the close's Python where this takes 0.3 (``timeit``)."""

    __slots__ = ("_value", "_error")

    def __init__(self, value: object = None, error: BaseException | None = None) -> None:
        self._value = value
        self._error = error

    def result(self) -> object:
        if self._error is not None:
            raise self._error
        return self._value


def _run_here(fn: Callable[..., object], *args: object) -> _Ran:
    """Run ``fn`` in this thread; its outcome, delivered by ``result()`` as a pool's Future's."""
    try:
        return _Ran(fn(*args))
    except BaseException as exc:  # delivered by result(), like a pool task's
        return _Ran(error=exc)


class FileHandle:
    """One open of a workspace file (the FUSE layer keeps one per open file descriptor)."""

    def __init__(self, of: OpenFile, release: Callable[[OpenFile], None], what: str) -> None:
        self._what = what  # "workspace 'name'", for messages
        self._of = of
        self._release = release
        self._closed = False

    @property
    def path(self) -> str:
        return self._of.path

    @property
    def file_id(self) -> int:
        """The file this handle opened, whatever its path now (``Workspace.revert`` acts on it)."""
        return self._of.id

    @property
    def staged_fd(self) -> int:
        """The staged file holding this file's bytes (``staged.py``), or -1: the descriptor a
        FUSE mount registers as the handle's backing file. Owned by the workspace."""
        return getattr(self._of, "fd", -1)

    def assume_mapped(self) -> None:
        """This handle may map its staged file without moving its atime (``O_NOATIME``):
        treat the file as maybe mapped (``StagedFile.assume_mapped``); nothing if not staged."""
        assume = getattr(self._of, "assume_mapped", None)
        if assume is not None:
            assume()

    @property
    def lingering(self) -> bool:
        """Whether the file stayed open after this handle's close because a mapping still
        holds its staged file (``lingering.py``): committed again when that goes."""
        return getattr(self._of, "lingering", False)

    def size(self) -> int:
        """The file's size now (a staged file may have been written by the kernel)."""
        return self._check().attr()[0]

    def attr(self) -> FileAttr:
        """The file's attributes now, as ``Workspace.stat`` of its path gives them while it
        is open there: the FUSE layer answers a CREATE with them, without a journal read
        and a second walk of the path for each new file."""
        of = self._check()
        size, mtime = of.attr()
        return FileAttr(size, mtime, False, of.mode)

    def _check(self) -> OpenFile:
        if self._closed:
            raise InvalidInput(f"file handle of {self._of.path!r} in {self._what} is closed")
        return self._of

    def read(self, offset: int, size: int) -> bytes:
        return self._check().read(offset, size)

    def _writable(self) -> OpenFile:
        of = self._check()
        if of.dropped:
            raise of.gone()
        return of

    def write(self, offset: int, data: bytes, *, short: bool = False) -> int:
        """``short``: see ``OpenFile.write`` (the FUSE layer's uncached WRITEs pass it)."""
        return self._writable().write(offset, data, short=short)

    def committed_now(self) -> bool:
        """See ``OpenFile.committed_now`` (False for a closed handle, a staged file or a
        dropped one: its fsync fails)."""
        return not self._closed and not self._of.dropped and self._of.committed_now()

    def releases_now(self) -> bool:
        """Whether ``close`` would do no I/O and wait for nothing: nothing to commit
        (``committed_now``) and no unlinked record to delete at the last close. The FUSE
        layer answers such a RELEASE on its request loop."""
        return not self._closed and self._of.committed_now() and not self._of.unlinked

    def writes_in_memory(self, offset: int, length: int) -> bool:
        """See ``OpenFile.writes_in_memory`` (False for a closed handle or a staged file)."""
        return not self._closed and not self._of.dropped and self._of.writes_in_memory(offset, length)

    def truncate(self, size: int) -> None:
        self._writable().truncate(size)

    def fsync(self) -> None:
        self._check().fsync()

    @property
    def released(self) -> bool:
        """Whether ``close`` let the handle go: a close whose commit failed keeps it open for
        a retry, so a caller that must let it go anyway can tell (the mount's RELEASE)."""
        return self._closed

    @property
    def shared(self) -> bool:
        """Whether another handle holds this file open (all share one ``OpenFile``)."""
        return self._of.refs > 1

    def close(self, *, commit: bool = True) -> None:
        """fsync, then release; on failure the handle stays open so the caller may retry.
        A dropped file (``OpenFile.drop``) has nothing to commit: its handle is released.

        ``commit=False``: release only, for a handle whose close was refused for space
        while another handle still holds the file (``shared``): what it holds is that
        handle's to commit or refuse at its own close (docs/writeback.md, "Out of space
        at close"); a commit here would acknowledge bytes whose close returned ENOSPC.
        And for the daemon's own reads of a file (a commit reading it back, adoption's
        comparison): what writers hold is theirs to acknowledge; a commit there made a
        half-written generation part of a version (bytes31)."""
        if self._closed:
            return
        if commit and not self._of.dropped:
            self._of.fsync()
        self._closed = True
        self._release(self._of)

    def __enter__(self) -> FileHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
