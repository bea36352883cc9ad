"""The bounded upload pool of one workspace: chunk uploads to the shared tier, in parallel.

``upload_concurrency`` threads, shared by every open file of the workspace, so many
writers cannot open unbounded connections. It holds no lock of its own (the executor's
queue is the only shared state) and imports nothing but the chunk store.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from datahub.writeback.chunks import ChunkStore


class UploadPool:
    def __init__(self, chunks: ChunkStore, concurrency: int, name: str) -> None:
        self.chunks = chunks
        self._pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix=f"wb-{name}")

    def upload_many(self, file_id: int, path: str, todo: list[tuple[int, bytes, int]]) -> list[str]:
        """Upload chunks in parallel (bounded pool); all succeed or the first error is raised."""
        if len(todo) == 1:
            index, data, _ = todo[0]
            return [self.chunks.put(file_id, index, data, path)]
        futures = [self._pool.submit(self.chunks.put, file_id, i, data, path) for i, data, _ in todo]
        keys, error = [], None
        for future in futures:
            try:
                keys.append(future.result())
            except Exception as exc:  # collect the rest so no upload runs on after we return
                error = error or exc
        if error is not None:
            self.delete_unreferenced(keys)
            raise error
        return keys

    def submit_upload(self, file_id: int, index: int, data: bytes, path: str) -> Future:
        return self._pool.submit(self.chunks.put, file_id, index, data, path)

    def submit_write(self, key: str, data: bytes, path: str) -> Future:
        """Upload one chunk under a key chosen beforehand (a commit names it meanwhile)."""
        return self._pool.submit(self.chunks.write, key, data, path)

    def submit_copy(self, key: str, fd: int, offset: int, length: int, path: str) -> Future:
        """Store a range of a staged file under a key chosen beforehand (``ChunkStore.copy_in``)."""
        return self._pool.submit(self.chunks.copy_in, key, fd, offset, length, path)

    def delete_unreferenced(self, keys: Iterable[str]) -> None:
        """Best effort: objects no journal entry references (a crash leaves them to the next GC)."""
        for key in keys:
            try:
                self.chunks.delete(key)
            except Exception:  # the object stays as garbage; the next GC pass collects it
                pass

    def shutdown(self) -> None:
        """Wait for running uploads, then stop the threads."""
        self._pool.shutdown(wait=True)
