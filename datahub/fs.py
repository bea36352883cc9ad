"""``datahub://dataset@version/path``: dataset versions as a read-only fsspec file system.

pandas, pyarrow, PIL or torch users read snapshots without a mount::

    import fsspec
    with fsspec.open("datahub://imagenet@v3/train/cat/0001.jpg", home="/var/datahub") as f:
        data = f.read()

Paths are ``DATASET[@REF]/KEY``: ``REF`` is anything the catalog resolves (``3``, ``v3``, a
tag, ``latest``; omitted = latest, resolved once per call, so a pinned ``@v3`` is what
makes a training run reproducible). The root lists datasets. Directory entries are
derived from record keys; a version holding both ``x`` and ``x/y`` shows the directory ``x``
and hides the file ``x``, as a mount does (docs/catalog.md, "Limits"). Bytes come through the tiered cache (``datahub.cache``), so
they are verified against the recorded etag and shared with every other reader of the
same cache directory.

Options (``fsspec.filesystem("datahub", ...)`` or ``storage_options``): ``config`` (a
datahub Config), else ``home`` / ``catalog_url`` / ``config_path`` to build one with
``load_config``. Registered through the ``fsspec.specs`` entry point, and by importing
this module. Everything that would write raises ReadOnly.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from pathlib import Path

import fsspec
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from datahub.catalog.model import Record
from datahub.catalog.store import past_subtree
from datahub.config import Config, init_command, load_config
from datahub.errors import NotFound, ReadOnly, RecordNotFound
from datahub.procs import at_exit, cancel_at_exit
from datahub.storage.base import ObjectRef
from datahub.validation import check_key, check_name, check_prefix

log = logging.getLogger(__name__)

#: services a forked child inherited from its parent's file systems (``_after_fork``)
_INHERITED: list[object] = []
_LIST_BATCH = 1000


class DatahubFileSystem(AbstractFileSystem):
    protocol = "datahub"
    root_marker = ""

    def __init__(
        self,
        config: Config | None = None,
        *,
        home: str | None = None,
        catalog_url: str | None = None,
        config_path: str | None = None,
        **storage_options,
    ) -> None:
        super().__init__(**storage_options)
        if config is None:
            overrides = {k: v for k, v in {"home": home, "catalog_url": catalog_url}.items() if v}
            config = load_config(config_path, overrides=overrides)
        self.config = config
        self._catalog = self._stores = self._cache = None
        self._at_exit = None
        self._pid = os.getpid()  # the process whose services these are (see _after_fork)

    def _after_fork(self) -> None:
        """In a forked child (a torch DataLoader worker), leave the parent's services alone.

        Why: the child used the parent's cache as its own. Its ``close()`` (or its exit hook)
        unregistered the parent's claim on the disk index, so after the parent was killed the
        next process trusted an index missing the parent's pages (the disk budget drifted); and
        a read of a page the parent was fetching at the fork waited for a thread that does not
        exist in the child. The child opens its own cache, stores and catalog on first use; the
        inherited ones are kept referenced, never closed or collected: their file descriptors
        and locks are the parent's (closing an SQLite or LMDB file in a process drops that
        process's POSIX locks on it, the child's own included)."""
        if self._pid == os.getpid():
            return
        if self._at_exit is not None:
            cancel_at_exit(self._at_exit)
            self._at_exit = None
        _INHERITED.extend(s for s in (self._cache, self._stores, self._catalog) if s is not None)
        self._catalog = self._stores = self._cache = None
        self._pid = os.getpid()

    # --- services, opened on first use --------------------------------------------------------
    @property
    def catalog(self):
        self._after_fork()
        if self._catalog is None:
            from datahub.catalog import open_catalog

            self._catalog = open_catalog(self._existing_catalog_url(), retry=self.config.catalog)
        return self._catalog

    def _existing_catalog_url(self) -> str:
        """The catalog URL, refused when it names an SQLite file that is not there.

        Why: a reader never creates a catalog. A mistyped ``home=`` made a new, empty catalog
        (and its home tree) there, and every path then read as "dataset not found"."""
        url = self.config.resolved_catalog_url
        if url.startswith("sqlite:///") and not Path(url[len("sqlite:///") :]).exists():
            raise FileNotFoundError(
                f"datahub://: no catalog at {url[len('sqlite:///') :]} (home {self.config.home_path}): "
                "pass home= the directory holding catalog.db, catalog_url=, config_path= or config=, "
                f"or create one there with `{init_command(self.config, Path(url[len('sqlite:///') :]))}`"
            )
        return url

    @property
    def cache(self):
        self._after_fork()
        if self._cache is None:
            from datahub.cache import open_cache
            from datahub.storage import StoreRegistry

            self._stores = StoreRegistry(self.config)
            self._cache = open_cache(self.config, self._stores)
            # fsspec users (pandas, torch, a notebook) never call close(): without it the disk
            # tier's batched index inserts are lost at exit, ``cache stats`` misses the pages and
            # the next process rebuilds the index from the page files. A weak reference, so an
            # instance that was closed (or collected) is not kept alive for the exit hook.
            self._at_exit = functools.partial(_close_at_exit, weakref.ref(self))
            at_exit(self._at_exit)
        return self._cache

    def close(self) -> None:
        """Close the cache, stores and catalog (fsspec keeps instances; tests and servers call this).

        Also run at interpreter exit for an instance whose cache was opened (see ``cache``).
        In a forked child it closes only what the child opened (``_after_fork``).
        """
        self._after_fork()
        if self._at_exit is not None:
            cancel_at_exit(self._at_exit)
            self._at_exit = None
        for service in (self._cache, self._stores, self._catalog):
            if service is not None:
                service.close()
        self._catalog = self._stores = self._cache = None
        self.clear_instance_cache()

    # --- paths ---------------------------------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("datahub://"):
            path = path[len("datahub://") :]
        return path.strip("/")

    def _split(self, path: str) -> tuple[str, str | None, str]:
        """``ds@v3/a/b`` -> ("ds", "v3", "a/b"); no ``@`` means latest (None)."""
        path = self._strip_protocol(path)
        head, _, key = path.partition("/")
        name, at, ref = head.partition("@")
        return check_name(name), (ref if at else None), key

    def _record(self, path: str, *, files_only: bool = True) -> tuple[Record, str]:
        """The record a file path names. ``files_only``: refuse a key that is also a directory
        (``x`` beside ``x/y``), as the mount does, at the cost of one more index probe."""
        name, ref, key = self._split(path)
        if not key:
            raise IsADirectoryError(path)
        try:
            if not files_only:
                return self.catalog.get_record(name, ref, key), self._strip_protocol(path)
            seq = self.catalog.resolve(name, ref).seq  # once: both questions ask the same version
            record = self.catalog.store.get_record(name, seq, check_key(key))
            if self._has_children(name, seq, key):
                raise IsADirectoryError(
                    f"{path}: a directory in {name}@{ref or 'latest'} (the file {key!r} beside keys "
                    f"under {key + '/'!r} is hidden, as on a mount: read it through the catalog's record)"
                )
            return record, self._strip_protocol(path)
        except RecordNotFound as exc:
            # a directory derived from keys below it: say so, as open() of a directory does
            # (it said "has no record 'sub'" while isdir() said True)
            if self._has_children(name, self.catalog.resolve(name, ref).seq, key):
                raise IsADirectoryError(
                    f"{path}: a directory in {name}@{ref or 'latest'}: read a file below it "
                    f"(fs.find({self._strip_protocol(path)!r}) lists them)"
                ) from None
            raise FileNotFoundError(f"{path}: {exc.message}") from exc
        except NotFound as exc:
            raise FileNotFoundError(f"{path}: {exc.message}") from exc

    def _has_children(self, name: str, seq: int, key: str) -> bool:
        """Whether any key of version ``seq`` (resolved by the caller) lies under ``key/``."""
        below = self.catalog.store.list_records(name, seq, prefix=check_prefix(f"{key}/"), limit=1)
        return next(iter(below), None) is not None

    @staticmethod
    def _file(path: str, record: Record) -> dict:
        return {
            "name": path,
            "size": record.size,
            "type": "file",
            "etag": record.etag,
            "url": record.url,
            "checksum": record.checksum,
        }

    # --- listing ---------------------------------------------------------------------------------
    def ls(self, path: str = "", detail: bool = True, **kwargs):
        path = self._strip_protocol(path)
        if not path:
            entries = [{"name": d.name, "size": 0, "type": "directory"} for d in self.catalog.list_datasets()]
        else:
            entries = self._ls_version(path)
        return entries if detail else [e["name"] for e in entries]

    def _ls_version(self, path: str) -> list[dict]:
        name, ref, key = self._split(path)
        head = path.split("/", 1)[0]
        prefix = f"{key}/" if key else ""
        entries: list[dict] = []
        cursor = ""
        try:
            # once: every page lists the same version. Why: each page resolved ``ref`` again,
            # and a commit or a tag moved between two pages listed no version (review25)
            seq = self.catalog.resolve(name, ref).seq
            while True:
                batch = list(
                    self.catalog.list_records(name, seq, prefix=prefix, start_after=cursor, limit=_LIST_BATCH)
                )
                for record in batch:
                    rest = record.key[len(prefix) :]
                    child, slash, _ = rest.partition("/")
                    if slash:
                        entries.append({"name": f"{head}/{prefix}{child}", "size": 0, "type": "directory"})
                        # skip the subdirectory's records with one jump, past every key it may
                        # hold. Why not one U+10FFFF: a key below it may start with that (a valid
                        # character), and the page after the jump began with that key's
                        # directory again: ls listed it forever (review36)
                        cursor = past_subtree(f"{prefix}{child}/")
                        break
                    entries.append(self._file(f"{head}/{record.key}", record))
                    cursor = record.key
                else:
                    if len(batch) < _LIST_BATCH:
                        break
        except NotFound as exc:
            raise FileNotFoundError(f"{path}: {exc.message}") from exc
        directories = {e["name"] for e in entries if e["type"] == "directory"}
        if directories:  # a file named as a directory beside it is hidden: the directory wins
            entries = [e for e in entries if e["type"] == "directory" or e["name"] not in directories]
        if not entries and key:  # nothing under it: a file of that version lists itself
            record = self._maybe_record(name, seq, key)
            if record is None:
                raise FileNotFoundError(f"{path}: no such file or directory in {name}@{ref or 'latest'}")
            return [self._file(self._strip_protocol(path), record)]
        return entries

    def info(self, path: str, **kwargs) -> dict:
        path = self._strip_protocol(path)
        if "/" not in path:
            name, ref, _ = self._split(path)
            try:
                if ref is None:
                    self.catalog.get_dataset(name)
                else:
                    self.catalog.resolve(name, ref)
            except NotFound as exc:
                raise FileNotFoundError(f"{path}: {exc.message}") from exc
            return {"name": path, "size": 0, "type": "directory"}
        name, ref, key = self._split(path)
        try:  # the directory first: it wins over a file of the same name
            seq = self.catalog.resolve(name, ref).seq  # once: both questions ask the same version
            if self._has_children(name, seq, key):
                return {"name": path, "size": 0, "type": "directory"}
        except NotFound as exc:
            raise FileNotFoundError(f"{path}: {exc.message}") from exc
        record = self._maybe_record(name, seq, key)
        if record is None:
            raise FileNotFoundError(f"{path}: no such file or directory in {name}@{ref or 'latest'}")
        return self._file(path, record)

    def find(self, path: str, maxdepth=None, withdirs: bool = False, detail: bool = False, **kwargs):
        """Every file below ``path`` in one streamed listing (directories derived if asked)."""
        if maxdepth is not None or withdirs:
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)
        path = self._strip_protocol(path)
        name, ref, key = self._split(path)
        head = path.split("/", 1)[0]
        out: dict[str, dict] = {}
        directories: set[str] = set()
        try:
            seq = self.catalog.resolve(name, ref).seq  # once: the listing and the file ask one version
            for record in self.catalog.list_records(name, seq, prefix=f"{key}/" if key else ""):
                out[f"{head}/{record.key}"] = self._file(f"{head}/{record.key}", record)
                _add_parents(directories, record.key)
            if key and not out and (record := self._maybe_record(name, seq, key)) is not None:
                out[path] = self._file(path, record)  # not a directory: find of a file finds it
        except NotFound as exc:
            raise FileNotFoundError(f"{path}: {exc.message}") from exc
        for hidden in [full for full in out if full.split("/", 1)[1] in directories]:
            del out[hidden]  # a file beside a directory of its name: the directory wins
        return out if detail else list(out)

    def _maybe_record(self, name: str, ref: str | int | None, key: str) -> Record | None:
        try:
            return self.catalog.get_record(name, ref, key)
        except NotFound:
            return None

    # --- reading ---------------------------------------------------------------------------------
    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs) -> bytes:
        record, _ = self._record(path)
        start = 0 if start is None else (record.size + start if start < 0 else start)
        end = record.size if end is None else (record.size + end if end < 0 else end)
        return self.cache.read(record.ref, max(start, 0), max(end - max(start, 0), 0))

    def _open(
        self, path: str, mode: str = "rb", block_size=None, autocommit=True, cache_options=None, **kwargs
    ):
        if mode != "rb":
            raise ReadOnly(
                f"datahub://{self._strip_protocol(path)} is a read-only dataset version (mode {mode!r})"
            )
        record, full = self._record(path)
        return DatahubFile(self, full, record.ref, block_size=block_size or self.config.cache.page_size)

    def hint(self, paths: list[str]) -> None:
        """Tell the cache the order these files will be read in (a sampler's next epoch)."""
        # no directory probe per path: a hint only orders the cache's readahead, never a read
        self.cache.hint([self._record(p, files_only=False)[0].ref for p in paths])

    # --- everything that would write ---------------------------------------------------------------
    def _read_only(self, path, *args, **kwargs):
        raise ReadOnly(f"datahub://{self._strip_protocol(str(path))}: dataset versions are read-only")

    mkdir = makedirs = rmdir = rm_file = _rm = rm = touch = pipe_file = cp_file = mv = put_file = _read_only


def _add_parents(directories: set[str], key: str) -> None:
    """Add every directory above ``key`` (``a/b/c``: ``a/b``, ``a``), stopping at one known."""
    parent = key.rpartition("/")[0]
    while parent and parent not in directories:
        directories.add(parent)
        parent = parent.rpartition("/")[0]


def _close_at_exit(ref: weakref.ref[DatahubFileSystem]) -> None:
    """Close a file system its user left open, so its disk tier's index is flushed and trusted."""
    fs = ref()
    if fs is None:
        return
    try:
        fs.close()
    except Exception as exc:  # an exit hook must not turn a clean exit into a traceback
        log.warning("datahub://: closing the cache at exit failed: %s", exc)


class DatahubFile(AbstractBufferedFile):
    """A read-only file whose ranges come from the tiered cache (which does its own readahead).

    A read, a seek and a line read each move the position under the file's lock, as Python's
    own buffered files do. Why: fsspec's ``read`` takes the position, fetches, then adds what
    it got, so two threads reading one open file (a loader's reader threads, a parquet reader's
    column threads) both read from the same position: each got the same bytes, the next range
    was skipped, and the file seemed to end early (review36)."""

    def __init__(self, fs: DatahubFileSystem, path: str, ref: ObjectRef, block_size: int) -> None:
        self.ref = ref
        self._lock_pid, self._lock = os.getpid(), threading.RLock()
        super().__init__(fs, path, mode="rb", block_size=block_size, cache_type="none", size=ref.size)

    @property
    def _position_lock(self) -> threading.RLock:
        """The file's lock; a new one in a forked child (a DataLoader worker), where a lock a
        parent thread held at the fork would never be released."""
        if self._lock_pid != os.getpid():
            self._lock_pid, self._lock = os.getpid(), threading.RLock()
        return self._lock

    def read(self, length: int = -1) -> bytes:
        with self._position_lock:
            return super().read(length)

    def seek(self, loc: int, whence: int = 0) -> int:
        with self._position_lock:
            return super().seek(loc, whence)

    def readuntil(self, char: bytes = b"\n", blocks: int | None = None) -> bytes:
        with self._position_lock:  # reads ahead, then seeks back to just past ``char``
            return super().readuntil(char, blocks)

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self.fs.cache.read(self.ref, start, end - start)


fsspec.register_implementation("datahub", DatahubFileSystem, clobber=True)
