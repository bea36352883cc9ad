"""A directory as an object store: key ``a/b/c.jpg`` is the file ``<root>/a/b/c.jpg``.

Etags. Every file's etag is ``<inode>-<size>-<mtime_ns>-<ctime_ns>`` in hex, taken from one
``stat`` (never the contents, so listing 100k files stays cheap). Why the ctime: a program
that rewrites a file in place and then sets its mtime back (``cp -p`` over a same-size file
of an equal mtime, ``touch -r``, ``rsync -t``) keeps inode, size and mtime, and only the
ctime, which no user can set, shows the new content. Without it the old etag passed a
conditional read of the new bytes while the cache held the old ones under it: a reader got
a file mixed from both. ``put`` takes the etag with an ``fstat`` after its rename (the last
change it makes to the file), so it returns exactly what a later stat or list reports.

Anything that moves the ctime counts as a change: ``chmod``, ``chown``, a new or removed
hard link, an xattr written; a re-import then records such a file as modified, and a read
under the etag recorded before raises ObjectChanged (re-import it). A file nobody touched
keeps its etag. Reads check the etag before and after their ``pread`` (a write moves the
ctime before it copies data). Limit: where the ctime clock is coarse (kernels before 6.13,
file systems without multigrain timestamps), a replacement within the clock tick of the
last change before the etag was taken still goes unnoticed (docs/storage.md).

Etags of records taken before the ctime field are checked as they were (``_etag_before_ctime``):
``<inode>-<size>-<mtime_ns>``, or the md5 an older put kept in the extended attribute
``user.datahub.etag`` with the size and mtime_ns it belonged to. They keep the old limit (a
replacement keeping size and mtime goes unnoticed) until a re-import records the new form.

Atomicity: a put writes a temp file in the target directory, fsyncs it, renames it over
the key and fsyncs the directory; readers see the old or the new file, never a mix.
``put_once`` (content-addressed blobs) renames without replacing, so a blob put by two
writers at once keeps the first one's inode and etag. ``put_replacing`` (a blob found not to
hold its content) replaces only the very file found wrong: see its docstring.
Temp files (``.datahub-tmp-*``) are invisible to listings.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import stat as stat_mod
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from datahub.errors import (
    AccessDenied,
    Conflict,
    InvalidInput,
    InvalidKey,
    NoSpace,
    ObjectChanged,
    ObjectNotFound,
    StorageError,
)
from datahub.storage.base import ObjectInfo, ObjectStore
from datahub.storage.keys import check_object_key, check_range

ETAG_XATTR = "user.datahub.etag"
TEMP_PREFIX = ".datahub-tmp-"
_CHUNK = 1024 * 1024


def derived_etag(st: os.stat_result) -> str:
    """A file's etag: changes whenever it is replaced, rewritten or touched, even with its
    size and mtime kept (the ctime moves; see the module)."""
    return f"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}-{st.st_ctime_ns:x}"


def _current_etag(target: int | str, st: os.stat_result, expected: str) -> str:
    """The file's etag in the form ``expected`` was taken in, to compare with it."""
    if expected.count("-") == 3:
        return derived_etag(st)
    return _etag_before_ctime(target, st)


def _etag_before_ctime(target: int | str, st: os.stat_result) -> str:
    """What stat and list reported before the ctime field: the md5 an older put recorded in
    the xattr while size and mtime still match, else ``<inode>-<size>-<mtime_ns>``. Only
    reads under etags recorded then are checked with it (their old limit: see the module)."""
    three_fields = f"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"
    try:
        raw = os.getxattr(target, ETAG_XATTR)
    except OSError:
        return three_fields
    try:
        md5, size, mtime_ns = raw.decode("ascii").split(" ")
        if int(size) == st.st_size and int(mtime_ns) == st.st_mtime_ns:
            return md5
    except ValueError:
        pass  # a foreign or damaged attribute
    return three_fields


def pread_full(fd: int, n: int, offset: int) -> bytes:
    """``n`` bytes at ``offset``, fewer only at the end of the file (one ``pread`` unless
    the kernel returns less, e.g. past 2 GiB)."""
    if n <= 0:
        return b""
    data = os.pread(fd, n, offset)
    if len(data) == n or not data:
        return data
    parts, got = [data], len(data)
    while got < n:
        more = os.pread(fd, n - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class LocalStore(ObjectStore):
    def __init__(self, root: str | os.PathLike[str], *, private: bool = False) -> None:
        """``private``: objects 0600 in 0700 directories, for a store that holds cached or
        staged bytes of many datasets (a ``file://`` shared tier), which no other local user
        may read whatever their own access; otherwise objects are 0644 like any file put."""
        self.root = Path(root).absolute()
        self._file_mode = 0o600 if private else 0o644
        self._dir_mode = 0o700 if private else 0o777  # 0o777: the umask decides, as mkdir's
        self._root_str = str(self.root)
        self.root_url = self.root.as_uri()

    # --- helpers -------------------------------------------------------------------------------
    def url_for(self, key: str) -> str:
        """A proper (percent-encoded) ``file://`` URL, as ``Path.as_uri`` makes."""
        return (self.root / key).as_uri()

    def identity(self) -> str:
        """The root's device and inode besides its URL: another file system mounted on the
        path, or the directory replaced, is another store ("" while the root is missing)."""
        try:
            st = os.stat(self._root_str)
        except OSError:
            return ""
        return f"{self.root_url} dev {st.st_dev:x} ino {st.st_ino:x}"

    def _path(self, key: str) -> Path:
        return self.root / self._checked(key)

    def _os_path(self, key: str) -> str:
        """``_path`` as a str: a cold file's read is one ``pread``, and pathlib's join cost
        more than that system call."""
        return os.path.join(self._root_str, self._checked(key))

    @staticmethod
    def _checked(key: str) -> str:
        check_object_key(key)
        if key.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
            raise InvalidKey(f"invalid key {key!r}: names starting with {TEMP_PREFIX} are reserved", key=key)
        return key

    @contextlib.contextmanager
    def _errors(self, key: str, writing: bool = False) -> Iterator[None]:
        """The one place OS errors become datahub errors for this backend."""
        # the file's whole path, from its leading / (a store rooted at file:/// would otherwise
        # name the key alone: 'tmp/x/a.jpg' for /tmp/x/a.jpg)
        where = f"object {key!r} in {self.root_url} (file {os.path.join(self._root_str, key)})"
        try:
            yield
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
            if writing:
                raise Conflict(
                    f"cannot store {where}: a file and a directory would share the path ({exc.strerror})",
                    store=self.root_url,
                    key=key,
                ) from exc
            raise ObjectNotFound(f"{where} not found", store=self.root_url, key=key) from exc
        except PermissionError as exc:
            raise AccessDenied(
                f"access denied to {where}: check the directory's permissions", store=self.root_url, key=key
            ) from exc
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise NoSpace(f"no space left to store {where}", store=self.root_url, key=key) from exc
            raise StorageError(f"local I/O error on {where}: {exc}", store=self.root_url, key=key) from exc

    @staticmethod
    def _info(key: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(key, st.st_size, derived_etag(st), st.st_mtime_ns / 1e9)

    # --- the five hooks ------------------------------------------------------------------------
    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        yield from self._walk(self.root, "", prefix, start_after)

    def _walk(self, directory: Path, base: str, prefix: str, start_after: str) -> Iterator[ObjectInfo]:
        """Depth-first in S3 key order: a directory ``d`` sorts as ``d/`` among its siblings.

        Only one directory's entries are held at a time; subtrees that cannot hold a key
        matching ``prefix`` or after ``start_after`` are not opened.
        """
        try:
            with os.scandir(directory) as it:
                entries = [
                    (e.name + "/" if e.is_dir(follow_symlinks=False) else e.name, e)
                    for e in it
                    if not e.name.startswith(TEMP_PREFIX)
                ]
        except (FileNotFoundError, NotADirectoryError):
            return
        entries.sort(key=lambda pair: pair[0])
        for name, entry in entries:
            key = base + name
            if name.endswith("/"):
                if not (key.startswith(prefix) or prefix.startswith(key)):
                    continue
                if key <= start_after and not start_after.startswith(key):
                    continue  # every key below is <= start_after
                yield from self._walk(Path(entry.path), key, prefix, start_after)
                continue
            if not key.startswith(prefix) or key <= start_after:
                continue
            try:
                st = entry.stat()  # follows a symlink placed in the tree on purpose
            except OSError:
                continue  # vanished (or dangling) since scandir
            if stat_mod.S_ISREG(st.st_mode):
                yield self._info(key, st)

    def stat(self, key: str) -> ObjectInfo:
        path = self._path(key)
        with self._errors(key):
            st = os.stat(path)
        if not stat_mod.S_ISREG(st.st_mode):
            raise ObjectNotFound(
                f"object {key!r} not found in {self.root_url} (it is a directory)",
                store=self.root_url,
                key=key,
            )
        with self._errors(key):  # a file linked twice: a put_once's link fallback may be midway
            return self._info(key, _settled(path, st))

    def read(self, key: str, start: int = 0, end: int | None = None, etag: str | None = None) -> bytes:
        """One open descriptor, its etag checked by ``fstat``, one ``pread``, and under an
        etag with the ctime one more ``fstat``.

        Why not ``open(path, "rb").read()``: a cold file through a mount is one read here,
        and the buffered file object made it ten system calls (``isatty``, three ``lseek``,
        a second ``read`` to find the end, ...) and as many releases of the GIL, each a
        hand-over to another of the mount's threads (docs/benchmarks.md, "Cold small
        file"). A whole read takes the size ``fstat`` saw with the etag. The ``fstat``
        after the ``pread``: a write into the file racing it moved the ctime before it
        copied data, so the bytes read are the etag's if the ctime is still the same.
        """
        check_range(key, start, end)
        path = self._os_path(key)
        with self._errors(key):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                st = os.fstat(fd)
                if not stat_mod.S_ISREG(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "not a regular file", path)
                if etag is not None:
                    self._check_etag(key, _current_etag(fd, st, etag), etag)
                data = pread_full(fd, (st.st_size if end is None else end) - start, start)
                self._check_after_read(key, fd, etag)
                return data
            finally:
                os.close(fd)

    def read_chunks(
        self,
        key: str,
        start: int = 0,
        end: int | None = None,
        etag: str | None = None,
        chunk_size: int = 1 << 20,
    ) -> Iterator[bytes]:
        """Reads of ``chunk_size`` from one open file, its etag checked at open and after
        every chunk.

        A put renames a new inode into place, so the open file keeps the bytes the etag
        named until the last chunk, even if the key is replaced meanwhile; a write into the
        open file itself moves its ctime, which the check after each chunk sees before the
        chunk is yielded (``_check_after_read``). Closing the generator early closes the file.
        """
        check_range(key, start, end)
        if chunk_size < 1:
            raise InvalidInput(f"read_chunks of {key!r}: chunk_size must be positive, not {chunk_size}")
        path = self._path(key)
        with self._errors(key):
            fh = open(path, "rb")  # noqa: SIM115 - closed in the finally below, across yields
        try:
            with self._errors(key):
                self._check_open_etag(key, fh, etag)
            left = None if end is None else end - start
            pos = start
            while left is None or left > 0:
                want = chunk_size if left is None else min(chunk_size, left)
                with self._errors(key):
                    chunk = os.pread(fh.fileno(), want, pos)
                    self._check_after_read(key, fh.fileno(), etag)
                if not chunk:
                    return
                pos += len(chunk)
                if left is not None:
                    left -= len(chunk)
                yield chunk
        finally:
            fh.close()

    def _check_open_etag(self, key: str, fh: BinaryIO, etag: str | None) -> None:
        """Check the very file we read from (a put renames a new inode into place)."""
        if etag is None:
            return
        self._check_etag(key, _current_etag(fh.fileno(), os.fstat(fh.fileno()), etag), etag)

    def _check_after_read(self, key: str, fd: int, etag: str | None) -> None:
        """After a ``pread`` under an etag with the ctime: the file still has it, so no write
        touched the bytes read (a write moves the ctime before it copies data).

        One exception: a file unlinked meanwhile (a put renamed another file over the key, or
        a delete) had its ctime moved by the unlink, and keeps the bytes it had, so there
        inode, size and mtime are checked (what a write by a descriptor opened before the
        unlink, keeping size and mtime, would escape). Etags of the older forms keep their
        old limit (the module)."""
        if etag is None or etag.count("-") != 3:
            return
        st = os.fstat(fd)
        current = derived_etag(st)
        if st.st_nlink == 0 and current.rsplit("-", 1)[0] == etag.rsplit("-", 1)[0]:
            return
        self._check_etag(key, current, etag)

    def _check_etag(self, key: str, current: str, etag: str) -> None:
        if current != etag:
            raise ObjectChanged(
                f"object {key!r} in {self.root_url} changed: expected etag {etag}, now {current} "
                "(the file was replaced, rewritten or its metadata changed since it was recorded); "
                "re-import it, or read a version that records it",
                store=self.root_url,
                key=key,
                expected=etag,
                actual=current,
            )

    def put(self, key: str, data: bytes | BinaryIO, size: int | None = None) -> ObjectInfo:
        """The etag is the file's after the rename, the last change the put makes to it (a
        rename moves the ctime on most file systems), so a later stat or list reports it."""
        return self._write(key, data, size, replace=True)[0]

    def put_once_created(
        self, key: str, data: bytes | BinaryIO, size: int | None = None
    ) -> tuple[ObjectInfo, bool]:
        """Create-exclusive: the temp file is renamed into place only if no file is there
        (``renameat2`` with ``RENAME_NOREPLACE``), so the first put of a blob keeps its inode
        and etag whoever puts it again; a later one is dropped and returns the stored file's
        info. Where the file system cannot rename without replacing (NFS, CephFS), a hard link
        (which fails on an existing name) then the temp name's unlink, which moves the ctime
        the etag holds: a writer that finds the name still linked twice drops the winner's temp
        name itself before it takes the etag (``_settled``), so both answer the same one."""
        return self._write(key, data, size, replace=False)

    def put_replacing(
        self, key: str, data: bytes | BinaryIO, size: int | None, etag: str
    ) -> ObjectInfo | None:
        """Put over the object of ``etag`` only; None if the name holds another file now (or
        none): the caller looks at what is there again (``blobs.store_blob``).

        Why: two writers that found the same wrong blob both replaced it, and the second's
        rename took away the file, and so the etag, the first had just returned: its records
        were unreadable for good (review19a). Now the replace runs under an ``flock`` of the
        key's directory, which every conditional replace of the store takes: the name is
        stat'ed there and must still have ``etag``, and the temp file is swapped in with
        ``renameat2(RENAME_EXCHANGE)``; the file swapped out must be the one stat'ed (same
        device and inode), else a writer that does not take the lock (a plain ``put``) put it
        meanwhile and it is swapped back. A name that now holds exactly these bytes is not
        replaced (``_identical_file``): it keeps its etag. Where the file system has no
        exchange (or no flock), a plain rename under the check."""
        with self._temp_copy(key, data, size) as (fh, tmp, written, path):
            same = _identical_file(path, fh.fileno(), written)
            if same is not None:  # fixed meanwhile with these bytes: it keeps its etag
                os.unlink(tmp)
                return self._info(key, same)
            self._seal(fh)
            with self._errors(key, writing=True), _locked(path.parent):
                if not _swap_if(tmp, path, etag):
                    os.unlink(tmp)
                    return None
                _fsync_dir(path.parent)
            return self._info(key, os.fstat(fh.fileno()))

    def _write(
        self, key: str, data: bytes | BinaryIO, size: int | None, *, replace: bool
    ) -> tuple[ObjectInfo, bool]:
        with self._temp_copy(key, data, size) as (fh, tmp, written, path):
            same = _identical_file(path, fh.fileno(), written) if replace else None
            if same is not None:  # nothing to change: the object keeps its etag
                os.unlink(tmp)
                return self._info(key, same), True
            self._seal(fh)
            with self._errors(key, writing=True):
                if replace:
                    os.replace(tmp, path)
                elif not _rename_noreplace(tmp, path):  # the name already holds its blob
                    os.unlink(tmp)
                    _fsync_dir(path.parent)  # its writer may not have made the name durable yet
                    return self._info(key, _settled(path, _regular(path))), False
                _fsync_dir(path.parent)
            return self._info(key, os.fstat(fh.fileno())), True

    @contextlib.contextmanager
    def _temp_copy(
        self, key: str, data: bytes | BinaryIO, size: int | None
    ) -> Iterator[tuple[BinaryIO, str, int, Path]]:
        """``data`` copied into a temp file beside the key's name, for every put to install
        its own way (replace, create-exclusive, replace-if-etag); the temp file is removed if
        the caller fails before installing it, so a failed put leaves nothing half-written."""
        path = self._path(key)
        with self._errors(key, writing=True):
            path.parent.mkdir(mode=self._dir_mode, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
        try:
            with self._errors(key), os.fdopen(fd, "wb") as fh:
                written = _write_stream(fh, data)
                if size is not None and written != size:
                    raise InvalidInput(
                        f"put of object {key!r}: declared size {size} but the data had {written} bytes",
                        key=key,
                    )
                fh.flush()
                yield fh, tmp, written, path
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _seal(self, fh: BinaryIO) -> None:
        """The store's file mode, then the bytes durable before the name is installed."""
        os.fchmod(fh.fileno(), self._file_mode)
        os.fsync(fh.fileno())

    def delete(self, key: str) -> None:
        path = self._path(key)
        with self._errors(key):
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                pass  # absent (a directory is not an object either): deleting is idempotent


def _write_stream(fh: BinaryIO, data: bytes | BinaryIO) -> int:
    """Copy ``data`` into ``fh`` in 1 MiB chunks; return the bytes written."""
    if isinstance(data, bytes | bytearray | memoryview):
        # 1 MiB slices of a view (no copy): on Linux one multi-MiB write() into the page
        # cache measured ~10x slower than the same bytes in 1 MiB writes (bench/writeback).
        # The views are released even on error, so a caller's bytearray is never left
        # pinned (unresizable) by a traceback that keeps this frame alive.
        with memoryview(data) as raw, raw.cast("B") as view:
            for start in range(0, len(view), _CHUNK):
                with view[start : start + _CHUNK] as piece:
                    fh.write(piece)
            return len(view)
    written = 0
    while chunk := data.read(_CHUNK):
        fh.write(chunk)
        written += len(chunk)
    return written


def _identical_file(path: Path, fd: int, size: int) -> os.stat_result | None:
    """The stat of the file at ``path`` if it holds exactly the ``size`` bytes of ``fd``, else None.

    Why: a put of the bytes an object already has must keep its etag, as S3's md5 etag does.
    The etag names the file (inode, ctime), so replacing it with equal bytes made every record
    taken of it unreadable (ObjectChanged): content-addressed names (``--copy`` blobs put by
    two imports at once) put the same bytes under one key by design. Costs a read of the old
    file only when it has the same size, stopping at the first chunk that differs; the file's
    stat before and after the comparison must agree, so one rewritten meanwhile is replaced."""
    try:
        old = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NOATIME)
    except OSError:
        return None  # absent (the common case), a directory, a link, or not ours to read
    try:
        before = os.fstat(old)
        if not stat_mod.S_ISREG(before.st_mode) or before.st_size != size:
            return None
        for offset in range(0, size, _CHUNK):
            n = min(_CHUNK, size - offset)
            if os.pread(old, n, offset) != os.pread(fd, n, offset):
                return None
        os.fsync(old)  # what the put promises of its bytes, whoever wrote them
        after = os.fstat(old)
        return after if derived_etag(after) == derived_etag(before) else None
    finally:
        os.close(old)


_RENAME_NOREPLACE = 1  # linux/fs.h
_AT_FDCWD = -100


def _renameat2() -> Callable[..., int] | None:
    """libc's ``renameat2`` (glibc 2.28+), or None: Python's os module has no way to ask a
    rename not to replace its target."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2()


def _rename_noreplace(tmp: str, path: Path) -> bool:
    """Rename ``tmp`` to ``path`` unless ``path`` exists: True if renamed, False if it existed."""
    if _RENAMEAT2 is not None:
        if _RENAMEAT2(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(path), _RENAME_NOREPLACE) == 0:
            return True
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            return False
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # else: the file system cannot
            raise OSError(err, os.strerror(err), str(path))
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    with contextlib.suppress(FileNotFoundError):  # a writer that found the name dropped it (_settled)
        os.unlink(tmp)
    return True


_RENAME_EXCHANGE = 2  # linux/fs.h


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive ``flock`` of ``directory`` for the block: what every conditional replace
    in it takes (blob directories are ``ab/cd/``: two replaces rarely share one). A file
    system without flock on a directory gives no lock: the exchange's check still holds."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _swap_if(tmp: str, path: Path, etag: str) -> bool:
    """Put ``tmp`` at ``path`` if ``path`` holds the file of ``etag``: True if put; else
    False, and ``tmp`` (the new file) is where it was. Called under ``_locked``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    if not stat_mod.S_ISREG(st.st_mode) or _current_etag(str(path), st, etag) != etag:
        return False
    if _RENAMEAT2 is None or _RENAMEAT2(
        _AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE
    ):
        err = ctypes.get_errno() if _RENAMEAT2 is not None else errno.ENOSYS
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), str(path))
        os.replace(tmp, path)  # no exchange here: the check under the lock is all there is
        return True
    out = os.lstat(tmp)  # the file swapped out: must be the one found wrong
    if (out.st_dev, out.st_ino) != (st.st_dev, st.st_ino) and not _RENAMEAT2(
        _AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE
    ):
        return False  # a plain put's file came meanwhile: back in place, ours out
    os.unlink(tmp)  # the file found wrong (or, if it could not go back, the plain put's)
    return True


def _settled(path: Path, st: os.stat_result) -> os.stat_result:
    """The stat of ``path`` once no put's temp name links to it any more.

    Why: ``_rename_noreplace``'s fallback links the temp file to the name, then unlinks the
    temp name, and that unlink moves the ctime the etag holds: a stat between the two took an
    etag the file lost a moment later, and a blob record holding it was unreadable for good
    (review17a). A file linked more than once is looked up among its directory's temp names
    (their inode numbers come with the listing, no stat each); one of them is a put's that
    has linked it and not yet unlinked its temp name, so doing that unlink here is doing its
    next step (it ignores the name being gone), and the stat after it holds the ctime the
    file keeps. Costs one listing of the directory, only for a file with several links; a
    reader without write access to the directory gets the stat as it was."""
    if st.st_nlink < 2:
        return st
    dropped = False
    with contextlib.suppress(OSError), os.scandir(path.parent) as entries:
        for entry in entries:
            if not (entry.name.startswith(TEMP_PREFIX) and entry.inode() == st.st_ino):
                continue
            with contextlib.suppress(FileNotFoundError):
                found = os.lstat(entry.path)
                if (found.st_dev, found.st_ino) == (st.st_dev, st.st_ino):
                    os.unlink(entry.path)
                    dropped = True
    return os.stat(path) if dropped else st


def _regular(path: Path) -> os.stat_result:
    """The stat of the file a create-exclusive put found at its name (a directory there is a
    conflict, as for ``put``)."""
    st = os.stat(path)
    if not stat_mod.S_ISREG(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "a directory holds the name", str(path))
    return st


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
