"""File commits: the journal side of an fsync/close (``ports.Committer``).

``OpenFile`` uploads its chunks through the upload pool, then hands its new chunk map here,
which points the file's record at it in one durable transaction (writing the record of a
created file with it: one commit per small file). A new file's first commit may run
alongside its uploads (``submit_commit``): its record is committed *unverified*; once the
uploads are durable the file is trusted (``trust``), and if one fails, ``undo_fresh``
takes the record out again. See ``workspace``'s docstring for the durability rule and
the lock order: this module holds no lock of its own; it runs journal transactions (lock
2) and updates the namespace's memory through ``Overlay`` (lock 3) after them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from datahub.errors import NotFound
from datahub.writeback import records
from datahub.writeback.chunks import ChunkStore
from datahub.writeback.journal import Journal, Txn
from datahub.writeback.overlay import Overlay
from datahub.writeback.ports import NotFresh, OpenFileView


@dataclass(frozen=True, slots=True)
class Cover:
    """A new small file's cover record (``FileCommitter.first_key``) and its bytes numbered 0,
    whose length is the room reserved for it: numbered once its commit has a number
    (``submit_commit``), never encoded twice (small41)."""

    record: dict
    template: bytes


class PendingCommit:
    """A file commit queued with ``Journal.submit``; ``result()`` waits for it and does the
    bookkeeping ``commit_file`` does after its transaction, in the waiting thread."""

    def __init__(self, committer: FileCommitter, file_id: int, request, trailer: bytes = b"") -> None:
        self._committer, self._file_id, self._request = committer, file_id, request
        self.trailer = trailer  # the cover record to write after the chunk (b"": none)

    def result(self) -> int:
        delta, gen = self._request.wait()
        self._committer.overlay.settle({self._file_id})
        self._committer.on_commit(delta)
        return gen


class FileCommitter:
    """Commits of open files' chunk maps for one workspace."""

    def __init__(
        self, journal: Journal, chunks: ChunkStore, overlay: Overlay, on_commit: Callable[[int], None]
    ) -> None:
        self.journal = journal
        self.chunks = chunks
        self.overlay = overlay
        self.what = overlay.what
        self.on_commit = on_commit  # the flusher's account of shared bytes: delta

    def commit_file(self, file_id: int, path: str, size: int, mtime: float, chunks: dict) -> int:
        """Point the file at its new chunks, all durable already, in one durable transaction;
        returns the new generation. (A first commit whose uploads run alongside goes through
        ``submit_commit`` instead.)"""
        delta, gen = self.journal.apply(
            f"fsync of {path!r}",
            lambda txn: self._commit_in(txn, file_id, path, size, mtime, chunks, None),
        )
        self.overlay.settle({file_id})
        self.overlay.verified(file_id)
        self.on_commit(delta)
        return gen

    def first_key(
        self, file_id: int, path: str, size: int, mtime: float, data: bytes
    ) -> tuple[str, Cover | None]:
        """The key of the one chunk of a new file of one chunk, and its cover record (None when
        the chunk cannot carry one, ``ChunkStore.carries_cover``): in a pack, room for the record
        is reserved after the chunk, so the pack's flush makes the record durable with it
        (``packs.py``, cover records); on RADOS and S3/RGW the record goes with the chunk's
        write op or PUT."""
        record = {"id": file_id, "path": path, "size": size, "mtime": mtime, "len": len(data)}
        record["crc"] = self.chunks.fingerprint(data)
        template = self.chunks.cover_trailer(0, record)
        key = self.chunks.new_key(file_id, 0, len(data), path, len(template))
        return key, Cover(record, template) if self.chunks.carries_cover(
            key, len(data), len(template)
        ) else None

    def submit_commit(
        self,
        file_id: int,
        path: str,
        size: int,
        mtime: float,
        chunks: dict,
        written: list[tuple[str, bytes]],
        cover: Cover | None = None,
    ) -> PendingCommit:
        """``commit_file`` of an overlapped first commit, queued for the journal's next group
        commit while the caller writes the chunks ``written`` (key, bytes); their fingerprints
        are computed by the committing thread. ``cover`` (from ``first_key``): the commit is
        covered; the caller writes ``PendingCommit.trailer`` after the chunk."""
        if cover is not None:
            known = {written[0][0]: [cover.record["len"], cover.record["crc"]]}

        def change(txn: Txn) -> tuple[int, int]:
            proofs = known if cover is not None else {
                key: [len(data), self.chunks.fingerprint(data)] for key, data in written
            }  # fmt: skip
            return self._commit_in(txn, file_id, path, size, mtime, chunks, proofs)

        request = self.journal.submit(f"fsync of {path!r}", change, covered=cover is not None)
        trailer = (
            self.chunks.renumber_cover(cover.template, request.cover, written[0][0], cover.record["len"])
            if cover is not None and request.cover
            else b""
        )
        return PendingCommit(self, file_id, request, trailer)

    def _commit_in(
        self,
        txn: Txn,
        file_id: int,
        path: str,
        size: int,
        mtime: float,
        chunks: dict,
        unverified: dict | None,
    ) -> tuple[int, int]:
        """The change of one file commit. ``unverified`` (key -> [length, fingerprint]) marks a
        first commit whose chunk uploads run alongside it; it raises ``NotFresh`` if the file
        is in the journal already."""
        existing = txn.file(file_id)
        materialise = self.overlay.materialise
        if unverified:  # only a file nothing of which is durable yet may name chunks in flight
            rec = None if existing is not None else materialise(txn, path, file_id, committing=True)
            if rec is None:
                raise NotFresh(path)
        else:
            rec = existing or materialise(txn, path, file_id, committing=True)
        if rec is None:
            raise NotFound(f"{path!r} vanished from the journal of {self.what}", path=path)
        return records.point_at_chunks(txn, file_id, rec, size, mtime, chunks, unverified)

    def begin_overlap(self) -> bool:
        """Enter an overlapped first commit, unless a namespace transaction runs or waits."""
        return self.overlay.begin_overlap()

    def end_overlap(self) -> None:
        self.overlay.end_overlap()

    def trust(self, file_id: int, gen: int) -> None:
        """Generation ``gen`` of the file, committed unverified, is known to be wholly durable."""
        self.overlay.trust(file_id, gen)

    def still_held(self, doing: str) -> None:
        """Raise (StorageError) unless this process may still acknowledge ``doing``: the
        journal's fence, asked again once an overlapped first commit's chunks landed. Why
        (review20b): the fence was asked when the commit ran, and a chunk (or a pack member
        and its cover record) slow to land may land after the lease lapsed, after another
        node adopted this journal without it (``adopt.py`` leaves out a first commit whose
        chunk it did not find); the close must not then return success."""
        self.journal.fence(doing)

    def undo_fresh(self, of: OpenFileView, gen: int) -> None:
        """An upload of a new file's overlapped first commit failed: take its record out of the
        journal again, so the file is back to created-but-unacknowledged (what the sequential
        way leaves after a failed upload). If even that fails, the record stays unverified:
        the flusher skips it, recovery drops it, a namespace operation writes it empty."""
        self.overlay.repend(of)
        try:
            delta = self.journal.apply(
                f"undo of the failed first fsync of {of.path!r}",
                lambda txn: records.undo_first_commit(txn, of.id, of.path, gen, self.what),
            )
        except Exception:  # the journal could not take it back: remember it as unsound
            self.overlay.keep_unsound(of, gen)
            return
        self.on_commit(delta)
