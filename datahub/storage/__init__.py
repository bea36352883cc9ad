"""Object-store access: one small interface (``ObjectStore``), four backends, one registry.

Root URLs:  ``s3://bucket[/prefix]``  ``file:///abs/dir``  ``memory://name[/prefix]``
``rados://pool[/prefix]`` (a Ceph pool, datahub.storage.rados).
Object URLs (what records and cache keys hold) add a key: ``s3://bucket/a/b.jpg``,
``file:///data/a/b.jpg``, ``memory://name/a/b.jpg``.

``open_store(url, config)`` opens one store for a root URL. ``StoreRegistry(config)`` turns
object URLs into ``(store, key)`` and keeps one store per bucket / file system / memory
space, all S3 stores sharing one connection pool; close it once at exit.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

from datahub.config import Config
from datahub.errors import InvalidInput
from datahub.procs import PerProcess
from datahub.storage.base import ObjectInfo, ObjectRef, ObjectStore
from datahub.storage.keys import check_foreign_key, check_object_key
from datahub.storage.local import LocalStore
from datahub.storage.memory import MemoryStore, drop_memory_space
from datahub.storage.transfer import copy_object, open_reader, put_file
from datahub.storage.urls import decode_key, encode_key
from datahub.validation import MAX_KEY_BYTES, MAX_SIZE, check_text

__all__ = [
    "check_record_fields",
    "LocalStore",
    "MemoryStore",
    "ObjectInfo",
    "ObjectRef",
    "ObjectStore",
    "StoreRegistry",
    "copy_object",
    "decode_key",
    "drop_memory_space",
    "encode_key",
    "open_reader",
    "open_store",
    "parse_url",
    "put_file",
    "split_object_url",
]

SCHEMES = ("s3", "file", "memory", "rados")


def parse_url(url: str) -> tuple[str, str, str]:
    """``url`` -> (scheme, authority, key path without the root's '/'), with clear errors.

    ``s3://`` and ``memory://`` paths are decoded by ``datahub.storage.urls.decode_key``;
    ``file://`` paths are RFC 8089 percent-encoded (as ``Path.as_uri`` writes them).
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidInput(
            f"invalid storage URL {url!r}: expected s3://, file://, memory:// or rados://", url=url
        )
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise InvalidInput(
            f"unsupported storage URL {url!r}: the scheme must be one of {', '.join(SCHEMES)}", url=url
        )
    # A raw '?' or '#' is read as part of the key only in s3:// URLs, which catalogs stored
    # raw before keys were escaped. file:// URLs were always percent-encoded, and memory://
    # spaces live in one process, so no stored URL of theirs needs the leniency.
    if scheme != "s3" and ("?" in rest or "#" in rest):
        raise InvalidInput(
            f"invalid storage URL {url!r}: no query or fragment allowed in a {scheme}:// URL "
            "(percent-encode '?' as %3F and '#' as %23)",
            url=url,
        )
    if scheme == "file":
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise InvalidInput(f"invalid file URL {url!r}: use file:///absolute/path", url=url)
        return scheme, "", unquote(parts.path).lstrip("/")
    authority, slash, path = rest.partition("/")
    if not authority or any(c in authority for c in "?#%"):
        raise InvalidInput(f"invalid storage URL {url!r}: it names no bucket or memory space", url=url)
    # Exactly one '/' separates the bucket from the key: S3 keys may begin with '/'.
    return scheme, authority, decode_key(path) if slash else ""


def split_object_url(url: str) -> tuple[str, str]:
    """Object URL -> (root URL of the store that holds it, key).

    ``s3://b/a/x`` -> (``s3://b``, ``a/x``); ``file:///a/x`` -> (``file:///``, ``a/x``);
    ``memory://m/a/x`` -> (``memory://m``, ``a/x``).
    """
    scheme, authority, path = parse_url(url)
    if not path or path.endswith("/"):
        raise InvalidInput(f"storage URL {url!r} names no object (it needs a key after the root)", url=url)
    # S3 buckets may hold any key; file and memory keys must be safe paths (no '..').
    (check_foreign_key if scheme == "s3" else check_object_key)(path)
    return (f"{scheme}://{authority}" if scheme != "file" else "file:///"), path


def check_record_fields(url: object, etag: object, size: object, key: str) -> None:
    """A record's object location: a URL some reader supports, a non-empty etag, a 64-bit size.

    Here, not in ``datahub.validation``, because only storage knows which URLs it can read.
    """
    if type(url) is str and len(url) <= PLAIN_S3_MAX and PLAIN_S3.fullmatch(url):
        pass  # a plain s3://bucket/key URL (the common case, one C regex): its key needs no checks
    else:
        _check_url(url, key)
    if not isinstance(etag, str) or not etag.strip():
        raise InvalidInput(
            f"record {key!r}: empty etag; record the object's etag (or version id) so reads can detect changes",
            key=key,
        )
    if not etag.isascii():
        _check_text_field(etag, "etag", key)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_SIZE:
        raise InvalidInput(f"record {key!r}: invalid size {size!r}: use 0..{MAX_SIZE}", key=key)


# s3://bucket/key where the key has no '%' (nothing to decode), no '?'/'#', does not end with
# '/', and is ASCII of at most MAX_KEY_BYTES: exactly what split_object_url accepts as is.
PLAIN_S3 = re.compile(
    r"[sS]3://[A-Za-z0-9][A-Za-z0-9._-]{0,62}/"
    rf"[A-Za-z0-9_.+=,@~ /!*'()$&:;-]{{0,{MAX_KEY_BYTES - 1}}}[A-Za-z0-9_.+=,@~ !*'()$&:;-]"
)
PLAIN_S3_MAX = len("s3://") + 63 + 1 + MAX_KEY_BYTES


def _check_text_field(value: str, what: str, key: str) -> None:
    try:
        check_text(value, what)
    except InvalidInput as exc:
        raise InvalidInput(f"record {key!r}: {exc.message}", key=key) from None


def _check_url(url: object, key: str) -> None:
    if isinstance(url, str) and not url.isascii():
        _check_text_field(url, "object url", key)
    scheme = url.partition("://")[0].lower() if isinstance(url, str) and "://" in url else ""
    if scheme not in SCHEMES:
        raise InvalidInput(
            f"record {key!r}: unsupported object url {str(url)[:200]!r}; use one of "
            + ", ".join(f"{s}://" for s in SCHEMES),
            key=key,
        )
    try:  # the URL must name one object that readers can find again (docs/storage.md)
        split_object_url(url)
    except InvalidInput as exc:
        raise InvalidInput(f"record {key!r}: unreadable object url: {exc.message}", key=key) from None


def _objects_prefix(config: Config) -> tuple[str, str] | None:
    """(bucket, key prefix) of an s3:// ``objects_url`` that ``objects_s3`` reaches, else None
    (no ``objects_s3``, or the same settings as ``[s3]``: one client serves both)."""
    if config.objects_s3 is None or config.objects_s3 == config.s3 or not config.objects_url:
        return None
    scheme, authority, path = parse_url(config.objects_url)
    return (authority, path.strip("/")) if scheme == "s3" else None


def _under(objects: tuple[str, str] | None, bucket: str, path: str) -> bool:
    """Whether the S3 root ``s3://bucket/path`` is the ``objects`` prefix or below it."""
    if objects is None:
        return False
    objects_bucket, prefix = objects
    path = path.strip("/")
    return bucket == objects_bucket and (not prefix or path == prefix or path.startswith(prefix + "/"))


def open_store(url: str, config: Config, **options: object) -> ObjectStore:
    """Open the store for a root URL. ``options`` go to the backend (e.g. ``page_size`` for S3).

    An S3 root at or under ``objects_url`` is reached with ``objects_s3`` when that is set
    (``StoreRegistry.store`` says why), any other with ``[s3]``."""
    scheme, authority, path = parse_url(url)
    if scheme == "file":
        return LocalStore(Path("/") / path)
    if scheme == "memory":
        return MemoryStore(authority, path)
    if scheme == "rados":
        from datahub.storage.rados import RadosStore  # python3-rados only when RADOS is used

        return RadosStore(authority, path)
    from datahub.storage.s3 import S3Store  # boto3 is imported only when S3 is used

    settings = config.objects_s3 if _under(_objects_prefix(config), authority, path) else config.s3
    return S3Store(authority, path, settings, **options)


class StoreRegistry:
    """Object URL -> (store, key), with stores cached per bucket / root and closed together.

    Thread-safe: caches and prefetchers resolve URLs from many threads. Opening a store does
    no I/O (S3 clients connect lazily), so holding the lock while opening is fine.

    Fork-safe: a forked child (a DataLoader worker) may read through a registry its parent
    opened. The S3 clients and their pooled connections are per process (``S3Connection``),
    so are the lock and the in-process memory spaces' locks: the child makes its own on
    first use and never reads an answer meant for its parent (tests/storage/test_fork27.py).
    """

    def __init__(self, config: Config, *, lean_s3_get: bool = True) -> None:
        """``lean_s3_get=False`` sends S3 GETs through boto3 (a benchmark's same-run baseline)."""
        self.config = config
        self._lean_s3_get = lean_s3_get
        self._lock = PerProcess(threading.Lock)  # a parent thread may hold it at a fork
        self._stores: dict[str, ObjectStore] = {}
        self._by_root: dict[str, ObjectStore] = {}  # root URLs as asked (``_stores`` is by canonical root)
        self._s3 = None  # one datahub.storage.s3.S3Connection shared by every bucket
        self._shared: dict[str, ObjectStore] = {}  # shared_store's, by root URL
        self._closed = False
        self._objects = _objects_prefix(config)  # (bucket, prefix) reached with objects_s3
        self._objects_s3 = None  # their own S3Connection: a client holds one set of credentials

    def for_url(self, url: str) -> tuple[ObjectStore, str]:
        root, key = split_object_url(url)
        if self._objects is not None:
            bucket, prefix = self._objects
            if root == f"s3://{bucket}" and (not prefix or key.startswith(prefix + "/")):
                return self.store(self.config.objects_url), key[len(prefix) + 1 :] if prefix else key
        return self.store(root), key

    def store(self, root_url: str) -> ObjectStore:
        """The cached store for a root URL (``s3://bucket/prefix`` roots are allowed too).

        A root at or under an s3:// ``objects_url`` is reached with ``objects_s3`` when that is
        set: the platform's objects bucket (blobs, pack shards, workspaces' flush targets) is
        the platform's, and a CSI dataset or workspace volume, whose publish the catalog
        authorised, reaches it with the plugin's keys while ``[s3]`` holds its pod's
        (docs/csi.md "Credentials"). Everything else is reached with ``[s3]``."""
        store = self._by_root.get(root_url)  # the cache asks once per fetch, with a root seen before
        if store is not None and not self._closed:
            return store
        scheme, authority, path = parse_url(root_url)
        canonical = f"{scheme}://{authority}/{path}".rstrip("/")
        with self._lock.get():
            if self._closed:
                raise InvalidInput("the store registry is closed")
            store = self._stores.get(canonical)
            if store is None:
                store = self._open(scheme, authority, path, root_url)
                self._stores[canonical] = store
            self._by_root[root_url] = store
            return store

    def shared_store(self, root_url: str) -> ObjectStore:
        """The store of the shared tier at ``root_url``: S3 is reached with ``cache.shared_s3``
        when it is set, never with ``[s3]``.

        The shared tier holds pages (and write-back chunks) that every node serves to every
        reader; a CSI volume's mount has its pod's credentials in ``[s3]`` and the plugin's
        in ``cache.shared_s3``, so a pod's key neither needs the shared bucket nor may write
        it (docs/csi.md "Credentials"). Unset (one user, one config): ``store(root_url)``."""
        settings = self.config.cache.shared_s3
        scheme, authority, path = parse_url(root_url)
        if scheme == "file":  # pages of every dataset: for this uid only (docs/cache.md)
            with self._lock.get():
                store = self._shared.get(root_url)
                if store is None:
                    store = self._shared[root_url] = LocalStore(Path("/") / path, private=True)
                return store
        if settings is None or scheme != "s3":
            return self.store(root_url)
        from datahub.storage.s3 import S3Store

        with self._lock.get():
            if self._closed:
                raise InvalidInput("the store registry is closed")
            store = self._shared.get(root_url)
            if store is None:  # its own connection: a client holds one set of credentials
                store = self._shared[root_url] = S3Store(
                    authority, path, settings, lean_get=self._lean_s3_get
                )
            return store

    def _open(self, scheme: str, authority: str, path: str, root_url: str) -> ObjectStore:
        if scheme != "s3":
            return open_store(root_url, self.config)
        from datahub.storage.s3 import S3Connection, S3Store

        if _under(self._objects, authority, path):
            settings = self.config.objects_s3
            if self._objects_s3 is None:
                self._objects_s3 = S3Connection(settings, lean_get=self._lean_s3_get)
            return S3Store(authority, path, settings, connection=self._objects_s3)
        if self._s3 is None:
            self._s3 = S3Connection(self.config.s3, lean_get=self._lean_s3_get)
        return S3Store(authority, path, self.config.s3, connection=self._s3)

    def fresh(self) -> StoreRegistry:
        """A registry like this one with nothing open yet, for a cache that owns and closes
        its stores (``TieredCache.reopen`` in a forked child); this one stays its opener's."""
        return StoreRegistry(self.config, lean_s3_get=self._lean_s3_get)

    def close(self) -> None:
        with self._lock.get():
            stores, self._stores, self._by_root = list(self._stores.values()), {}, {}
            stores += self._shared.values()
            self._shared = {}
            connections = [c for c in (self._s3, self._objects_s3) if c is not None]
            self._s3 = self._objects_s3 = None
            self._closed = True
        for store in stores:
            store.close()
        for connection in connections:
            connection.close()

    def __enter__(self) -> StoreRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
