"""A Ceph RADOS pool as an object store: ``rados://pool[/prefix]``, key ``k`` is object ``prefix/k``.

Why: the shared cache tier on Ceph can skip RGW (no HTTP, no bucket index update per
page) and talk to the OSDs directly. It is the same small ObjectStore contract as S3,
local and memory, so the shared tier (datahub/cache/shared.py) needs no RADOS code.

Client: Debian's ``python3-rados`` (built for CPython 3.11; a venv imports it from a
directory holding its ``rados*.so`` put on PYTHONPATH, see scripts/ceph-dev/README.md).
Which cluster, which identity and which keyring come from Ceph's own client configuration,
as for the ``rados`` CLI: ``$CEPH_CONF`` (else /etc/ceph/ceph.conf) and ``$CEPH_ARGS``
(e.g. ``--id datahub``). Ceph's op timeouts default to "wait for ever"; a store whose
configuration leaves them at 0 sets them to ``DEFAULT_TIMEOUT`` so a node cut off from
the cluster gets a TransientStorageError (EIO at the mount), never a hang.

Etags: ``v<object version>-<size>`` in hex, the version librados reports for the op that
wrote the object: every write changes it, whoever makes it (a put of ours, a ``write_full``
of another tool), so an etag never names two contents. A put writes the content and empties
the xattr ``datahub.etag`` in one atomic RADOS write op; objects put before this scheme hold
``<md5> <size>`` there and keep that md5 as their etag (records of them stay readable) while
their bytes hash to it: checked by one whole read of the object's current version, once per
store and version (``_legacy_holds``; a listing reads nothing whole and gives an unproven one
its version etag, which a read takes as well). Before (review20a) the size alone was checked, and
another tool's ``write_full`` of the same size keeps every xattr: the md5 named the new bytes,
a conditional read under it returned them, and a blob proven under it was kept holding them.
The md5 is not computed for puts (1.4 ms of CPU per MiB put, more than librados' whole
write). A verified version is remembered in memory only: a mark stored on the object would
move its version (any write does), so no mark can name the version it was made at. Bytes are
guarded by Ceph itself (the messenger's CRC-32C on the wire, BlueStore's checksums at
rest). A conditional read checks the etag and reads the bytes on one per-thread I/O context
and compares the object versions librados reports for both ops, so bytes of another
version are never returned under the etag.

Fork (fork28): the cluster handle, its I/O contexts and the lock guarding them are per process
(``datahub.procs.PerProcess``). librados' threads (messenger, objecter, timers) do not exist in
a forked child: a DataLoader worker that used its parent's handle sent ops nothing answered
and waited for ever, and one that closed the store hung shutting the parent's handle down.
A child connects its own on first use; the parent's is kept there, never used or shut down.

Limits: an object is one RADOS object, written whole (no striping): at most
``MAX_OBJECT_BYTES``. RADOS lists in hash order, so ``list`` collects the names under the
prefix and sorts them before it streams their stats: cost grows with the pool's object
count, fine for the shared tier's sweeps (at most one a minute), not for huge origins.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shlex
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, BinaryIO

from datahub.errors import (
    AccessDenied,
    InvalidInput,
    ObjectChanged,
    ObjectNotFound,
    StorageError,
    TransientStorageError,
)
from datahub.procs import PerProcess
from datahub.storage.base import ObjectInfo, ObjectStore
from datahub.storage.keys import check_object_key, check_range, read_all
from datahub.storage.urls import encode_key

ETAG_XATTR = "datahub.etag"
RECORD_XATTR = "datahub.record"  # put_with_record
DEFAULT_TIMEOUT = 30  # whole seconds (Ceph refuses fractions), for Ceph op timeouts the configuration leaves at 0 (= for ever)
MAX_OBJECT_BYTES = 64 * 1024**2  # below Ceph's osd_max_write_size (90 MB) and object size (128 MiB)
_TIMEOUT_OPTIONS = ("rados_osd_op_timeout", "rados_mon_op_timeout", "client_mount_timeout")
_VERSION_RETRIES = 3  # a conditional read racing a rewrite of the same etag tries again
LEGACY_MEMORY = 65_536  # (object, version) pairs whose older md5 etag a whole read proved, per store


def _import_rados() -> Any:
    try:
        import rados  # Debian's python3-rados, needed only by rados:// stores
    except ImportError as exc:
        raise StorageError(
            "rados:// stores need the python3-rados module (Debian package python3-rados); "
            "from a virtualenv, put the directory holding its rados*.so on PYTHONPATH "
            f"({exc})"
        ) from None
    return rados


def _client_name(ceph_args: str) -> dict[str, str]:
    """``rados.Rados`` keyword for the client named in ``$CEPH_ARGS`` (``--id x``, ``--name client.x``)."""
    args = shlex.split(ceph_args)
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if not eq and i + 1 < len(args):
            value = args[i + 1]
        if flag in ("--id", "-i", "--user") and value:
            return {"rados_id": value}
        if flag in ("--name", "-n") and value:
            return {"name": value}
    return {}


class RadosStore(ObjectStore):
    """Thread-safe. Connects on first use (opening a store does no I/O); ``close`` disconnects."""

    def __init__(self, pool: str, prefix: str = "") -> None:
        self.pool = pool
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.root_url = f"rados://{pool}" + (f"/{encode_key(self.prefix.rstrip('/'))}" if self.prefix else "")
        # This process's connection (fork28): a forked child (a DataLoader worker) connects its
        # own; the parent's handle is kept there, never used or shut down (module docstring).
        self._session: PerProcess[_Session] = PerProcess(_Session)
        self._closed = False
        # object name -> (version, md5) a whole read proved (``_legacy_holds``), oldest first
        self._legacy: dict[str, tuple[int, str]] = {}

    # --- connection ----------------------------------------------------------------------------
    def _connect(self, session: _Session) -> None:
        """Connect ``session``'s cluster handle (called under its lock)."""
        rados = _import_rados()
        # conffile "" = Ceph's search: $CEPH_CONF, /etc/ceph/ceph.conf. The client's name must be
        # given at creation, so --id/--name in $CEPH_ARGS are read here; the rest below.
        cluster = rados.Rados(conffile="", **_client_name(os.environ.get("CEPH_ARGS", "")))
        try:
            cluster.conf_parse_env()  # the rest of $CEPH_ARGS
            for option in _TIMEOUT_OPTIONS:
                if float(cluster.conf_get(option) or 0) <= 0:
                    cluster.conf_set(option, str(DEFAULT_TIMEOUT))
            timeout = float(cluster.conf_get("client_mount_timeout"))
            cluster.connect(timeout=int(max(1, timeout)))
            if not cluster.pool_exists(self.pool):
                raise StorageError(
                    f"{self.root_url}: the Ceph cluster has no pool {self.pool!r}; create it first"
                )
            fsid = cluster.get_fsid()
        except rados.Error as exc:
            cluster.shutdown()
            raise self._error(exc, "connect", "") from None
        except BaseException:
            cluster.shutdown()
            raise
        session.cluster, session.fsid = cluster, fsid

    def _ioctx(self) -> Any:
        """This thread's I/O context (its own, so ``get_last_version`` reports this thread's op).

        Closed when the thread ends (its thread-local holder goes): a mount's request threads
        come and go (trio lets an idle worker thread exit after 10 s), and every context kept
        for a dead thread was kept until ``close``, a leak that grew with the mount's uptime."""
        session = self._session.get()
        holder = getattr(session.local, "holder", None)
        if holder is not None:
            return holder.ioctx
        with session.lock:
            if self._closed:
                raise StorageError(f"{self.root_url}: the store is closed")
            if session.cluster is None:
                self._connect(session)
            rados = _import_rados()
            try:
                ioctx = session.cluster.open_ioctx(self.pool)
            except rados.Error as exc:
                raise self._error(exc, "open pool", "") from None
            session.ioctxs.append(ioctx)
        holder = session.local.holder = _ThreadIoctx(ioctx)
        weakref.finalize(holder, _release_ioctx, weakref.ref(self), ioctx)
        return ioctx

    def identity(self) -> str:
        """The cluster's fsid besides the pool's URL (connecting if need be). Why: an etag here
        is an object version, which another cluster with a pool of the same name (its
        ``$CEPH_CONF``) may have under the same key with other bytes, so a proof of a blob on
        one is no proof on the other (guard19)."""
        self._ioctx()
        return f"ceph fsid {self._session.get().fsid} {self.root_url}"

    @property
    def _ioctxs(self) -> list[Any]:
        """This process's open I/O contexts (never a parent's)."""
        session = self._session.current()
        return list(session.ioctxs) if session is not None else []

    def _forget(self, ioctx: Any) -> None:
        """A thread that used ``ioctx`` ended: close it, unless ``close`` did already, or it is
        a parent's (a forked child drops the parent's other threads, and their I/O contexts'
        holders with them: closing one there would act on the parent's handle)."""
        session = self._session.current()
        if session is None:
            return
        with session.lock:
            if ioctx not in session.ioctxs:
                return
            session.ioctxs.remove(ioctx)
        with contextlib.suppress(Exception):
            ioctx.close()

    def close(self) -> None:
        """Close this process's I/O contexts and shut its cluster handle down; in a forked
        child, never the parent's (kept, unused: ``PerProcess``)."""
        self._closed = True
        session = self._session.drop()
        if session is None:
            return
        with session.lock:
            ioctxs, session.ioctxs = session.ioctxs, []
            cluster, session.cluster = session.cluster, None
        for ioctx in ioctxs:
            with contextlib.suppress(Exception):
                ioctx.close()
        if cluster is not None:
            cluster.shutdown()

    # --- errors --------------------------------------------------------------------------------
    def _error(self, exc: Exception, action: str, key: str) -> Exception:
        """The one translation of librados errors into datahub.errors."""
        rados = _import_rados()
        where = f"object {key!r} in {self.root_url}" if key else self.root_url
        if isinstance(exc, rados.ObjectNotFound):
            return ObjectNotFound(f"{where} not found", store=self.root_url, key=key)
        if isinstance(exc, rados.PermissionError | rados.PermissionDeniedError) and action == "connect":
            return AccessDenied(
                f"the Ceph cluster refused the client's key for {where}: check the keyring in "
                f"$CEPH_CONF and the client name in $CEPH_ARGS ({exc})",
                store=self.root_url,
                key=key,
            )
        if isinstance(exc, rados.PermissionError | rados.PermissionDeniedError):
            return AccessDenied(
                f"{action} of {where} was denied by Ceph: give the client's key osd caps on pool "
                f"{self.pool!r} ({exc})",
                store=self.root_url,
                key=key,
            )
        if isinstance(exc, rados.TimedOut | rados.InterruptedOrTimeoutError | rados.ConnectionShutdown):
            return TransientStorageError(
                f"{action} of {where} timed out: the Ceph cluster did not answer ({exc})",
                store=self.root_url,
                key=key,
            )
        return StorageError(f"{action} of {where} failed: {exc}", store=self.root_url, key=key)

    # --- objects -------------------------------------------------------------------------------
    def _name(self, key: str) -> str:
        check_object_key(key)
        return self.prefix + key

    def _info(self, ioctx: Any, name: str, key: str, verify: bool = True) -> tuple[ObjectInfo, int]:
        """Info of one object and the object version it describes. ``verify=False`` (a listing:
        sweeps and opens want sizes, and would read every older object whole) gives an older
        put's md5 only if this store proved it already, else the version etag, which names
        the same bytes (``read`` takes either)."""
        rados = _import_rados()
        try:
            size, mtime = ioctx.stat(name)
            version = ioctx.get_last_version()
            try:
                raw = ioctx.get_xattr(name, ETAG_XATTR).decode("ascii")
            except rados.NoData:
                raw = ""
            if ioctx.get_last_version() != version:
                raise _Raced
        except rados.Error as exc:
            raise self._error(exc, "stat", key) from None
        md5, _, recorded_size = raw.partition(" ")  # an older put's record (module docstring)
        legacy = (
            md5
            and recorded_size == str(size)
            and (
                self._legacy_known(name, version, md5)
                or (verify and self._legacy_holds(ioctx, name, key, version, size, md5))
            )
        )
        etag = md5 if legacy else _version_etag(version, size)
        return ObjectInfo(key, size, etag, time.mktime(mtime)), version

    def _legacy_holds(self, ioctx: Any, name: str, key: str, version: int, size: int, md5: str) -> bool:
        """Whether version ``version`` of object ``name`` holds the bytes of the older put's
        ``md5``: remembered, or one whole read (the object is at most ``MAX_OBJECT_BYTES``).
        Why (review20a): another tool's same-size rewrite keeps the xattr, so the md5 alone
        named bytes it never hashed. Raises ``_Raced`` if the object changed during the read."""
        rados = _import_rados()
        try:
            data = ioctx.read(name, size, 0) if size else b""
            if size and ioctx.get_last_version() != version:
                raise _Raced
        except rados.Error as exc:
            raise self._error(exc, "read", key) from None
        if len(data) != size or hashlib.md5(data, usedforsecurity=False).hexdigest() != md5:
            return False
        with self._session.get().lock:
            self._legacy.pop(name, None)
            self._legacy[name] = (version, md5)
            while len(self._legacy) > LEGACY_MEMORY:
                del self._legacy[next(iter(self._legacy))]
        return True

    def _legacy_known(self, name: str, version: int, md5: str) -> bool:
        """Whether ``_legacy_holds`` proved ``md5`` for this version of object ``name``."""
        with self._session.get().lock:
            return self._legacy.get(name) == (version, md5)

    def _stat(self, key: str, verify: bool = True) -> tuple[ObjectInfo, int]:
        name, ioctx = self._name(key), self._ioctx()
        for _ in range(_VERSION_RETRIES):
            with contextlib.suppress(_Raced):
                return self._info(ioctx, name, key, verify)
        raise TransientStorageError(
            f"object {key!r} in {self.root_url} kept changing while read", store=self.root_url, key=key
        )

    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ObjectInfo]:
        full, after = self.prefix + prefix, self.prefix + start_after
        rados = _import_rados()
        ioctx = self._ioctx()
        try:
            names = sorted(o.key for o in ioctx.list_objects() if o.key.startswith(full) and o.key > after)
        except rados.Error as exc:
            raise self._error(exc, "list", prefix) from None
        cut = len(self.prefix)
        for name in names:
            try:
                info, _ = self._stat(name[cut:], verify=False)
            except ObjectNotFound:
                continue  # deleted since the listing
            yield info

    def stat(self, key: str) -> ObjectInfo:
        return self._stat(key)[0]

    def read(self, key: str, start: int = 0, end: int | None = None, etag: str | None = None) -> bytes:
        check_range(key, start, end)
        name = self._name(key)
        rados = _import_rados()
        ioctx = self._ioctx()
        if etag is None:  # the shared tier's case: one or two ops (its pages check themselves)
            try:
                if end is None or end == start:  # the size, or only that the object exists
                    size = ioctx.stat(name)[0]
                    stop = size if end is None else end
                else:
                    stop = end
                return ioctx.read(name, stop - start, start) if stop > start else b""
            except rados.Error as exc:
                raise self._error(exc, "read", key) from None
        for _ in range(_VERSION_RETRIES):
            info, version = self._stat(key, verify=_etag_version(etag) is None)  # an md5 is proven
            if etag not in (info.etag, _version_etag(version, info.size)):  # a proven md5, or the version
                raise ObjectChanged(
                    f"object {key!r} in {self.root_url} changed: expected etag {etag}, now {info.etag}",
                    store=self.root_url,
                    key=key,
                    expected=etag,
                    actual=info.etag,
                )
            stop = info.size if end is None else min(end, info.size)
            if stop <= start:
                return b""
            try:
                data = ioctx.read(name, stop - start, start)
            except rados.Error as exc:
                raise self._error(exc, "read", key) from None
            if ioctx.get_last_version() == version:
                return data
        raise TransientStorageError(
            f"object {key!r} in {self.root_url} kept changing while read", store=self.root_url, key=key
        )

    def read_chunks(
        self,
        key: str,
        start: int = 0,
        end: int | None = None,
        etag: str | None = None,
        chunk_size: int = 1 << 20,
    ) -> Iterator[bytes]:
        """One conditional read per chunk: a rewrite mid-stream is ObjectChanged, never a mix."""
        check_range(key, start, end)
        info, version = self._stat(key, verify=etag is None or _etag_version(etag) is None)
        etag = info.etag if etag is None else etag
        stop = info.size if end is None else min(end, info.size)
        if etag not in (info.etag, _version_etag(version, info.size)) or stop <= start:
            self.read(key, start, start, etag)  # ObjectChanged naming both etags, or nothing
            return
        for offset in range(start, stop, chunk_size):
            yield self.read(key, offset, min(offset + chunk_size, stop), etag)

    def put(self, key: str, data: bytes | BinaryIO, size: int | None = None) -> ObjectInfo:
        return self._put(key, data, size, b"")

    def put_once_created(
        self, key: str, data: bytes | BinaryIO, size: int | None = None
    ) -> tuple[ObjectInfo, bool]:
        """An exclusive create (``LIBRADOS_CREATE_EXCLUSIVE`` in the same write op as the
        content): an object already at ``key`` is kept and its info returned. Why: the etag is
        the object's version, which every write moves, so the base class's put-then-stat left a
        window where a second writer's put changed the etag a first record had taken
        (pinblobs16's finding; the lead)."""
        rados = _import_rados()
        try:
            return self._put(key, data, size, b"", exclusive=True), True
        except rados.ObjectExists:
            return self.stat(key), False

    def put_replacing(
        self, key: str, data: bytes | BinaryIO, size: int | None, etag: str
    ) -> ObjectInfo | None:
        """Put over the object of ``etag`` only: the write op asserts the object's version
        (``assert_version``), so it writes nothing if any write came since (or the object is
        gone); None then, and the caller looks again (``blobs.store_blob``). Why: two writers
        that found one wrong blob both replaced it, and the second's write moved the version,
        the etag, the first had returned (review19a). An etag from before object versions
        (an older put's md5) cannot be asserted: put over unconditionally, as before."""
        version = _etag_version(etag)
        if version is None:
            return self.put(key, data, size)
        rados = _import_rados()
        try:
            return self._put(key, data, size, b"", version=version)
        except rados.ObjectNotFound:
            return None
        except rados.Error as exc:
            if getattr(exc, "errno", None) in (errno.ERANGE, errno.EOVERFLOW):  # another version
                return None
            raise self._error(exc, "put", key) from None

    def put_with_record(self, key: str, data: bytes | bytearray, record: bytes) -> ObjectInfo:
        """``put``, with ``record`` stored in the object's xattr ``datahub.record`` by the same
        atomic write op: durable with the bytes or not at all. Why: a write-back cover record
        (datahub/writeback/chunks.py) rides with its chunk instead of costing a journal flush."""
        return self._put(key, data, None, record)

    def record(self, key: str) -> bytes:
        """What ``put_with_record`` stored with object ``key`` (b"" if nothing)."""
        rados = _import_rados()
        try:
            return self._ioctx().get_xattr(self._name(key), RECORD_XATTR)
        except rados.NoData:
            return b""
        except rados.Error as exc:
            raise self._error(exc, "read the record of", key) from None

    def _put(
        self,
        key: str,
        data: bytes | bytearray | BinaryIO,
        size: int | None,
        record: bytes,
        *,
        exclusive: bool = False,
        version: int | None = None,
    ) -> ObjectInfo:
        name = self._name(key)
        payload = read_all(data, key)
        if size is not None and len(payload) != size:
            raise InvalidInput(
                f"put of object {key!r}: declared size {size} but the data had {len(payload)} bytes", key=key
            )
        if len(payload) > MAX_OBJECT_BYTES:
            raise InvalidInput(
                f"put of object {key!r} in {self.root_url}: {len(payload)} bytes is more than a rados:// "
                f"store holds in one object ({MAX_OBJECT_BYTES}); use an s3:// store for large objects",
                key=key,
            )
        rados = _import_rados()
        ioctx = self._ioctx()
        try:
            op = ioctx.create_write_op()  # the content, and any md5 an older put recorded gone, at once
            try:
                if exclusive:  # fails the whole op, writing nothing, if the object exists
                    op.new(rados.LIBRADOS_CREATE_EXCLUSIVE)
                if version is not None:  # fails it if the object is at another version (or gone)
                    op.assert_version(version)
                op.write_full(payload)
                op.set_xattr(ETAG_XATTR, b"")
                if record:
                    op.set_xattr(RECORD_XATTR, record)
                now = time.time()
                ioctx.operate_write_op(op, name, mtime=int(now))  # the binding's default mtime is 0
            finally:
                ioctx.release_write_op(op)
            version = ioctx.get_last_version()  # of this thread's own context: the op above
        except rados.Error as exc:
            if exclusive and isinstance(exc, rados.ObjectExists):
                raise  # put_once's answer: the stored object stays
            if version is not None:
                raise  # put_replacing's to judge
            raise self._error(exc, "put", key) from None
        return ObjectInfo(key, len(payload), _version_etag(version, len(payload)), float(int(now)))

    def delete(self, key: str) -> None:
        name = self._name(key)
        rados = _import_rados()
        try:
            self._ioctx().remove_object(name)
        except rados.ObjectNotFound:
            pass
        except rados.Error as exc:
            raise self._error(exc, "delete", key) from None


class _Session:
    """One process's connection to the cluster: its ``rados.Rados`` handle (connected on first
    use), the cluster's fsid, its threads' I/O contexts and the lock guarding them (and the
    store's ``_legacy``: a lock a parent thread held at a fork is never released in the child)."""

    __slots__ = ("cluster", "fsid", "ioctxs", "local", "lock")

    def __init__(self) -> None:
        self.cluster: Any = None
        self.fsid = ""
        self.ioctxs: list[Any] = []
        self.local = threading.local()
        self.lock = threading.Lock()


class _ThreadIoctx:
    """One thread's I/O context, held in the store's thread-local data: when the thread ends,
    this goes and its finalizer closes the context (``RadosStore._ioctx``)."""

    __slots__ = ("__weakref__", "ioctx")

    def __init__(self, ioctx: Any) -> None:
        self.ioctx = ioctx


def _release_ioctx(store_ref: weakref.ref, ioctx: Any) -> None:
    store = store_ref()
    if store is not None:
        store._forget(ioctx)


def _version_etag(version: int, size: int) -> str:
    """The etag of the object version ``version`` of ``size`` bytes."""
    return f"v{version:x}-{size:x}"


def _etag_version(etag: str) -> int | None:
    """The object version an etag of ``_version_etag`` names (None: another form)."""
    head, _, _ = etag.partition("-")
    try:
        return int(head[1:], 16) if head.startswith("v") and len(head) > 1 else None
    except ValueError:
        return None


class _Raced(Exception):
    """The object changed between two ops of one stat; the caller tries again."""
