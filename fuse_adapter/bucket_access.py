"""A bucket mount serves an object's bytes only once S3 let this mount's credentials read it.

Why: the node's disk tier and the shared tier keep pages by (URL, etag, page), which name no
caller. A bucket mount reads with credentials of its own (a CSI bucket volume's Secret, the
user's configuration of ``datahub mount MNT s3://bucket/prefix``), so a mount whose
credentials may list a bucket but not read an object was served the pages another mount had
read before: S3 never saw its credentials for them (docs/csi.md, "Who may publish what").

The rule: an object version is *allowed* for this mount once S3 answered a read of it with
this mount's credentials. Two things prove it:

- the origin of this process answered a page read of it (``ByteSource.watch_origin``): a
  cold read is its own check and costs no request more;
- else, before the first bytes of it are served from a tier, one 1-byte GET of the object
  under If-Match with this mount's credentials (S3 checks ``s3:GetObject`` exactly as for
  the data; 403 is EACCES, a changed object ESTALE, a deleted one ENOENT).

Allowed objects are remembered for the life of the mount process (128-bit digests of URL and
etag): one check per object per mount at most, whatever the number of opens, so warm opens
the kernel answers from pyfuse3's C tables stay without the daemon (a file reaches those
tables only through :meth:`ObjectAccess.allowed` or a check). Pods of one staged volume share
its mount and so its allowed set (they bring the same credentials: csi/node.py refuses
others). Every other mount of the node shares the cached bytes and pays one small GET per
object it reads warm.
"""

from __future__ import annotations

import hashlib
import threading

from datahub.storage.base import ObjectRef


def _name(url: str, etag: str) -> int:
    """A 128-bit digest of an object version (no collision can let another object through)."""
    digest = hashlib.blake2b(f"{url}\0{etag}".encode(), digest_size=16).digest()
    return int.from_bytes(digest, "little")


class ObjectAccess:
    """The objects this mount's credentials were allowed to read, and the check of the others."""

    def __init__(self, stores) -> None:  # stores: datahub.storage.StoreRegistry of the mount
        self._stores = stores
        self._allowed: set[int] = set()
        self._lock = threading.Lock()  # the in-flight checks
        self._checking: dict[int, threading.Event] = {}
        self.checks = 0  # requests sent to check an object
        self.denied = 0

    def granted(self, url: str, etag: str) -> None:
        """The origin answered a read of ``(url, etag)`` with this process's credentials."""
        self._allowed.add(_name(url, etag))

    def allowed(self, ref: ObjectRef) -> bool:
        """Whether ``ref``'s bytes may be served now (no I/O: safe on the FUSE loop)."""
        return ref.size == 0 or _name(ref.url, ref.etag) in self._allowed

    def check(self, ref: ObjectRef) -> None:
        """Return once ``ref`` is allowed; else raise the store's error for a read of it
        (AccessDenied, ObjectChanged, ObjectNotFound, ...). Blocking: one request the first
        time, shared by concurrent callers for the same object."""
        if self.allowed(ref):
            return
        name = _name(ref.url, ref.etag)
        while True:
            with self._lock:
                if name in self._allowed:
                    return
                waiting = self._checking.get(name)
                if waiting is None:
                    done = self._checking[name] = threading.Event()
                    break
            waiting.wait()  # the other caller's answer; if it failed, ask again ourselves
        ok = False
        try:
            store, key = self._stores.for_url(ref.url)
            store.read(key, 0, 1, etag=ref.etag)  # the store's error is the reader's (EACCES, ESTALE ...)
            self._allowed.add(name)
            ok = True
        finally:
            with self._lock:
                del self._checking[name]
                self.checks += 1
                self.denied += not ok
            done.set()

    def stats(self) -> dict:
        return {
            "access_allowed": len(self._allowed),
            "access_checks": self.checks,
            "access_denied": self.denied,
        }
