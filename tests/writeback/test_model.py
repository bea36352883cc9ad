"""Random operation sequences against an in-memory reference model (hypothesis stateful).

The model keeps two views: ``files`` (what reads must return now, unacknowledged handle
writes included) and ``acked`` (what survives a crash: closed/fsynced data and every
namespace operation). A "crash" drops the workspace without closing it and reopens it;
a "flush" must leave the origin holding exactly the journaled files. A file created
through the open handle is not acknowledged until its first fsync/close; a successful
namespace operation journals it as an empty file (``unacked``: the flusher leaves it out of
the origin, and a crash drops it, as recovery drops every file no fsync/close of its own
acknowledged).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from datahub.errors import AlreadyExists, IsADirectory, NotADirectory, NotEmpty, NotFound
from tests.ram import RAM, ram_tempdir, ram_usable
from tests.writeback.conftest import CHUNK, LAYOUTS, make_env

# few names, so operations often hit existing files and directories
PARENTS = st.sampled_from(["", "d1", "d1/d2"])
NAMES = st.sampled_from(["a", "b", "d1", "d2"])
DATA = st.binary(min_size=0, max_size=2 * CHUNK + 10)
OFFSETS = st.integers(min_value=0, max_value=3 * CHUNK)


def join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def patched(content: bytes, offset: int, data: bytes) -> bytes:
    if not data:
        return content  # an empty write never extends a file
    base = content.ljust(offset, b"\0")
    return base[:offset] + data + base[offset + len(data) :]


class WorkspaceModel(RuleBasedStateMachine):
    layout = "packs"
    # Its workspace in RAM (tests/ram.py): a crash here is a workspace dropped in-process, never a
    # power loss, so no fsync of it matters, and with 4 KiB chunks every one goes into a pack
    # (buffered writes: the same path on tmpfs as on a disk). On the disk its ~5,000 fdatasyncs
    # (1.1-1.4 ms each on the 2-core VM) were most of its wall (docs/benchmarks.md, "suite71").
    in_ram = True

    def __init__(self) -> None:
        super().__init__()
        self.tmp = ram_tempdir("wb-model-") if self.in_ram else Path(tempfile.mkdtemp(prefix="wb-model-"))
        self.env = make_env(self.tmp, **LAYOUTS[self.layout])
        self.ws = self.env.open()
        self.files: dict[str, bytes] = {}
        self.acked: dict[str, bytes] = {}
        self.dirs: set[str] = set()
        self.handle = None
        self.hpath = ""
        self.unacked = False  # the handle's created file was journaled empty, never acknowledged

    def teardown(self) -> None:
        self.env.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- model helpers -------------------------------------------------------------------------
    def kind(self, path: str) -> str | None:
        return "d" if path == "" or path in self.dirs else "f" if path in self.files else None

    def parent_error(self, path: str) -> type[Exception] | None:
        parent = path.rpartition("/")[0]
        k = self.kind(parent)
        return NotFound if k is None else NotADirectory if k == "f" else None

    def touches_handle(self, *paths: str) -> bool:
        return self.handle is not None and any(
            p == self.hpath or self.hpath.startswith(p + "/") for p in paths
        )

    def expect(self, error: type[Exception] | None, action) -> bool:
        if error is None:
            action()
            return True
        try:
            action()
        except error:
            return False
        raise AssertionError(f"expected {error.__name__}")

    def namespace_changed(self) -> None:
        """A namespace operation succeeded: a created, never fsynced file is now journaled,
        empty and unacknowledged (a crash drops it)."""
        if self.handle is not None and self.hpath not in self.acked:
            self.unacked = True

    # --- namespace -----------------------------------------------------------------------------
    @rule(parent=PARENTS, name=NAMES)
    def mkdir(self, parent: str, name: str) -> None:
        path = join(parent, name)
        error = self.parent_error(path) or (AlreadyExists if self.kind(path) else None)
        if self.expect(error, lambda: self.ws.mkdir(path)):
            self.dirs.add(path)
            self.namespace_changed()

    @rule(parent=PARENTS, name=NAMES, offset=OFFSETS, data=DATA)
    def write_file(self, parent: str, name: str, offset: int, data: bytes) -> None:
        path = join(parent, name)
        if self.touches_handle(path):
            return
        error = IsADirectory if self.kind(path) == "d" else self.parent_error(path)

        def act() -> None:
            with self.ws.open(path, create=True) as fh:
                fh.write(offset, data)

        if self.expect(error, act):
            self.files[path] = self.acked[path] = patched(self.files.get(path, b""), offset, data)

    @rule(parent=PARENTS, name=NAMES, size=OFFSETS)
    def truncate(self, parent: str, name: str, size: int) -> None:
        path = join(parent, name)
        if self.touches_handle(path):
            return
        k = self.kind(path)
        error = IsADirectory if k == "d" else (self.parent_error(path) or NotFound) if k is None else None
        if self.expect(error, lambda: self.ws.truncate(path, size)):
            self.files[path] = self.acked[path] = self.files[path][:size].ljust(size, b"\0")

    @precondition(lambda self: self.files)
    @rule(data=st.data())
    def resize_or_patch_existing(self, data) -> None:
        """Sizes and offsets near the current end: shrink-then-grow and sparse writes."""
        path = data.draw(st.sampled_from(sorted(self.files)))
        if self.touches_handle(path):
            return
        end = len(self.files[path])
        point = data.draw(st.integers(min_value=0, max_value=end + CHUNK))
        if data.draw(st.booleans()):
            self.ws.truncate(path, point)
            self.files[path] = self.acked[path] = self.files[path][:point].ljust(point, b"\0")
        else:
            piece = data.draw(st.binary(min_size=1, max_size=CHUNK + 10))
            with self.ws.open(path) as fh:
                fh.write(point, piece)
            self.files[path] = self.acked[path] = patched(self.files[path], point, piece)

    @rule(parent=PARENTS, name=NAMES)
    def unlink(self, parent: str, name: str) -> None:
        path = join(parent, name)
        if self.touches_handle(path):
            return
        k = self.kind(path)
        error = IsADirectory if k == "d" else (self.parent_error(path) or NotFound) if k is None else None
        if self.expect(error, lambda: self.ws.unlink(path)):
            del self.files[path], self.acked[path]
            self.namespace_changed()

    @rule(parent=PARENTS, name=NAMES)
    def rmdir(self, parent: str, name: str) -> None:
        path = join(parent, name)
        k = self.kind(path)
        busy = any(p.startswith(path + "/") for p in [*self.files, *self.dirs])
        error = (
            NotADirectory if k == "f" else (self.parent_error(path) or NotFound) if k is None
            else NotEmpty if busy else None
        )  # fmt: skip
        if self.expect(error, lambda: self.ws.rmdir(path)):
            self.dirs.discard(path)
            self.namespace_changed()

    @rule(src_parent=PARENTS, src=NAMES, dst_parent=PARENTS, dst=NAMES)
    def rename(self, src_parent: str, src: str, dst_parent: str, dst: str) -> None:
        old, new = join(src_parent, src), join(dst_parent, dst)
        k, target = self.kind(old), self.kind(new)
        # only well-defined, non-error moves (error paths are covered by test_posix)
        if k is None or old == new or new.startswith(old + "/") or self.parent_error(new):
            return
        if target is not None and not (k == "f" and target == "f"):
            return
        if self.touches_handle(old, new):
            return
        self.ws.rename(old, new)
        self.namespace_changed()
        moved = lambda p: new + p[len(old) :] if p == old or p.startswith(old + "/") else p  # noqa: E731
        # a file moved over another replaces it: drop the target before moving
        self.files = {moved(p): v for p, v in self.files.items() if p != new}
        self.acked = {moved(p): v for p, v in self.acked.items() if p != new}
        self.dirs = {moved(p) for p in self.dirs}

    # --- an open handle with unacknowledged writes ---------------------------------------------
    @precondition(lambda self: self.handle is None and self.files)
    @rule(data=st.data())
    def open_handle(self, data) -> None:
        self.hpath = data.draw(st.sampled_from(sorted(self.files)))
        self.handle = self.ws.open(self.hpath)

    @precondition(lambda self: self.handle is None)
    @rule(parent=PARENTS, name=NAMES)
    def create_handle(self, parent: str, name: str) -> None:
        """A new file held open: unacknowledged (even its existence) until fsync/close."""
        path = join(parent, name)
        if self.kind(path) is not None or self.parent_error(path):
            return
        self.handle, self.hpath = self.ws.open(path, create=True), path
        self.files[path] = b""

    @precondition(lambda self: self.handle is not None)
    @rule(offset=OFFSETS, data=DATA)
    def handle_write(self, offset: int, data: bytes) -> None:
        self.handle.write(offset, data)
        self.files[self.hpath] = patched(self.files[self.hpath], offset, data)

    @precondition(lambda self: self.handle is not None)
    @rule(close=st.booleans())
    def handle_fsync(self, close: bool) -> None:
        if close:
            self.handle.close()
            self.handle = None
        else:
            self.handle.fsync()
        self.acked[self.hpath] = self.files[self.hpath]
        self.unacked = False

    # --- crash and flush -----------------------------------------------------------------------
    @rule()
    def crash(self) -> None:
        self.ws = self.env.crash_and_reopen(self.ws)
        self.files = dict(self.acked)
        self.handle = None
        self.unacked = False

    @rule()
    def flush(self) -> None:
        self.ws.flush()
        # an unacked file (journaled empty, never fsynced or closed) is not the origin's
        expected = {p: hashlib.sha256(v).hexdigest() for p, v in self.acked.items()}
        assert self.env.origin_files() == expected

    @invariant()
    def reads_match_the_model(self) -> None:
        for path, content in self.files.items():
            assert self.ws.stat(path).size == len(content), path
            if self.handle is not None and path == self.hpath:
                # read through the open handle: closing another handle of the same file
                # would fsync it (all handles share one page cache), acknowledging the writes
                assert self.handle.read(0, len(content) + 3) == content, path
                continue
            with self.ws.open(path) as fh:
                assert fh.read(0, len(content) + 3) == content, path
        listed = set()
        stack = [""]
        while stack:
            d = stack.pop()
            for name, attr in self.ws.listdir(d):
                p = join(d, name)
                listed.add(p)
                if attr.is_dir:
                    stack.append(p)
        assert listed == set(self.files) | self.dirs


TestWorkspaceModel = WorkspaceModel.TestCase
TestWorkspaceModel.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck)
)


class ChunkFilesModel(WorkspaceModel):
    layout = "chunk files"
    in_ram = False  # each chunk a file written with O_DIRECT: a path tmpfs does not take


TestChunkFilesModel = ChunkFilesModel.TestCase
TestChunkFilesModel.settings = TestWorkspaceModel.settings


def test_the_packs_model_runs_in_ram_and_the_chunk_files_model_on_a_disk() -> None:
    """Where each model's workspace lives (WorkspaceModel says why): the chunk files' O_DIRECT
    writes need a file system that takes them, so that model never leaves the disk."""
    on_tmpfs = {}
    for model in (WorkspaceModel(), ChunkFilesModel()):
        try:
            on_tmpfs[model.layout] = model.tmp.parent == RAM
        finally:
            model.teardown()
    assert on_tmpfs == {"packs": ram_usable(), "chunk files": False}
