"""The small interfaces the write-back parts talk through, so the arrows point one way.

``files.OpenFile`` buffers a file and needs someone to upload its chunks (``Uploader``: the
bounded pool, ``uploads.UploadPool``) and someone to commit its chunk map (``Committer``:
``commits.FileCommitter``); the ``Flusher`` needs a namespace to read the journal from and
to ask which records are safe to copy (``FlushSource``: ``workspace.Workspace``). The
namespace builds all of them and imports ``files`` and ``flusher``; they import only this
module (and plain data), never ``workspace``. ``tests/writeback/test_imports.py`` checks that.

Protocols, not base classes: nothing here runs, and a test double needs no inheritance.
``tests/writeback/test_imports.py`` checks that the real parts have every member named here.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # types only; neither module imports back into the namespace
    from datahub.writeback.chunks import ChunkStore
    from datahub.writeback.journal import Journal


class NotFresh(Exception):
    """The file was written into the journal meanwhile: its first commit cannot be overlapped."""


class PendingResult(Protocol):
    trailer: bytes  # a cover record to write after the chunk (b"": none)

    def result(self) -> int: ...


@runtime_checkable
class OpenFileView(Protocol):
    """What the flusher and the committer see of an open file."""

    id: int
    path: str
    pending: bool


@runtime_checkable
class Uploader(Protocol):
    """Chunk uploads for one workspace: a bounded pool over the chunk store."""

    chunks: ChunkStore

    def upload_many(self, file_id: int, path: str, todo: list[tuple[int, bytes, int]]) -> list[str]: ...

    def submit_upload(self, file_id: int, index: int, data: bytes, path: str) -> Future: ...

    def submit_write(self, key: str, data: bytes, path: str) -> Future: ...

    def submit_copy(self, key: str, fd: int, offset: int, length: int, path: str) -> Future: ...

    def delete_unreferenced(self, keys: Iterable[str]) -> None: ...


@runtime_checkable
class Committer(Protocol):
    """Journal commits of one file's chunk map, and the bookkeeping of overlapped first commits."""

    def commit_file(self, file_id: int, path: str, size: int, mtime: float, chunks: dict) -> int: ...

    def first_key(
        self, file_id: int, path: str, size: int, mtime: float, data: bytes
    ) -> tuple[str, dict | None]: ...

    def submit_commit(
        self,
        file_id: int,
        path: str,
        size: int,
        mtime: float,
        chunks: dict,
        written: list[tuple[str, bytes]],
        cover: dict | None = None,
    ) -> PendingResult: ...

    def begin_overlap(self) -> bool: ...

    def end_overlap(self) -> None: ...

    def trust(self, file_id: int, gen: int) -> None: ...

    def undo_fresh(self, of: OpenFileView, gen: int) -> None: ...

    def still_held(self, doing: str) -> None: ...


@runtime_checkable
class FlushSource(Protocol):
    """What the flusher needs of the namespace it copies to the origin."""

    name: str
    what: str
    chunk_size: int
    chunks: ChunkStore
    journal: Journal

    def open_files(self) -> list[OpenFileView]: ...

    def trusted(self, file_id: int, rec: dict) -> bool: ...

    def forget_trust(self, file_ids: Iterable[int]) -> None: ...

    def begin_evict(self, file_id: int) -> bool: ...

    def end_evict(self, file_id: int) -> None: ...

    def delete_unreferenced(self, keys: Iterable[str]) -> None: ...
