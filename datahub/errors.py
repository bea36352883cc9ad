"""One error tree for the whole project.

Every layer raises these (never a bare library exception), and each protocol boundary
translates them exactly once: HTTP status in ``datahub.api``, errno in ``fuse_adapter``,
gRPC code in ``csi``, exit code in ``datahub.cli``. The ``code`` is a stable string that
scripts may match on; the message names the dataset / version / key and what to do.
"""

from __future__ import annotations

import errno as _errno


class DatahubError(Exception):
    """Base of every error datahub raises on purpose."""

    code: str = "internal"
    http_status: int = 500
    errno: int = _errno.EIO
    exit_code: int = 1

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "message": self.message,
            **({"details": self.details} if self.details else {}),
        }


# --- bad input (promise 4: a clear error, nothing changed) -----------------------------------
class InvalidInput(DatahubError):
    code, http_status, errno, exit_code = "invalid_input", 400, _errno.EINVAL, 2


class InvalidName(InvalidInput):
    code = "invalid_name"


class InvalidKey(InvalidInput):
    code = "invalid_key"


class NameTooLong(InvalidKey):
    """A name over NAME_MAX bytes brought into a workspace: ``File name too long`` at a mount,
    as a local file system answers (EINVAL told a user nothing about the length)."""

    errno = _errno.ENAMETOOLONG


class ManifestError(InvalidInput):
    """A malformed import manifest; the message names the line number."""

    code = "invalid_manifest"


class NoChanges(InvalidInput):
    """An empty change set: it would create a version identical to its parent, so none is made."""

    code = "no_changes"


class PayloadTooLarge(InvalidInput):
    code, http_status = "payload_too_large", 413


class BodyTimeout(InvalidInput):
    """A request body that did not arrive in full within the body-read deadline."""

    code, http_status = "request_timeout", 408


class ReadOnly(DatahubError):
    code, http_status, errno, exit_code = "read_only", 405, _errno.EROFS, 2


# --- not found ---------------------------------------------------------------------------------
class NotFound(DatahubError):
    code, http_status, errno, exit_code = "not_found", 404, _errno.ENOENT, 3


class DatasetNotFound(NotFound):
    code = "dataset_not_found"


class VersionNotFound(NotFound):
    code = "version_not_found"


class RecordNotFound(NotFound):
    code = "record_not_found"


class ObjectNotFound(NotFound):
    """The object store has no such object (S3 404)."""

    code = "object_not_found"


# --- conflicts -----------------------------------------------------------------------------------
class AlreadyExists(DatahubError):
    code, http_status, errno, exit_code = "already_exists", 409, _errno.EEXIST, 4


class Conflict(DatahubError):
    code, http_status, errno, exit_code = "conflict", 409, _errno.EBUSY, 4


class NotEmpty(Conflict):
    """A directory still has entries (rmdir, or rename over a non-empty directory)."""

    code, errno = "not_empty", _errno.ENOTEMPTY


class IsADirectory(InvalidInput):
    """A file operation named a directory."""

    code, errno = "is_a_directory", _errno.EISDIR


class NotADirectory(InvalidInput):
    """A directory operation (or a path component) named a file."""

    code, errno = "not_a_directory", _errno.ENOTDIR


class StaleBase(Conflict):
    """A commit named a base version that is no longer the dataset's head."""

    code = "stale_base"


class PreconditionFailed(Conflict):
    """An update named a dataset revision (``If-Match``) that is no longer the current one:
    someone changed the dataset since the caller read it; re-read and retry."""

    code, http_status = "precondition_failed", 412


class CommitIdReused(Conflict):
    """A ``commit_id`` sent again with a different change set: it is not a retry."""

    code = "commit_id_reused"


class ObjectChanged(DatahubError):
    """The object behind a committed record no longer has the recorded etag (promise 1)."""

    code, http_status, errno, exit_code = "object_changed", 412, _errno.ESTALE, 5


# --- auth (promise 5) ----------------------------------------------------------------------------
class Unauthenticated(DatahubError):
    code, http_status, errno, exit_code = "unauthenticated", 401, _errno.EACCES, 6


class AccessDenied(DatahubError):
    code, http_status, errno, exit_code = "access_denied", 403, _errno.EACCES, 6


class ModeNotKept(AccessDenied):
    """A chmod that would hide a workspace file from the other accounts a mount lets in: the
    mount shows every file 0644 whatever is asked, so accepting it told the owner the file was
    private while they went on reading it (caller74). EPERM, as chmod(2) answers a mode change
    it may not make."""

    code, errno = "mode_not_kept", _errno.EPERM


class TooManyAttempts(DatahubError):
    """Too many failed sign-ins (a password, typed again) for one account or from one client
    address: refused unchecked until ``details["retry_after"]`` seconds passed, so passwords
    cannot be guessed online at full speed. HTTP 429 with ``Retry-After``. The message is the
    same whether the account exists or not."""

    code, http_status, errno, exit_code = "too_many_attempts", 429, _errno.EAGAIN, 6


# --- storage / infrastructure --------------------------------------------------------------------
class StorageError(DatahubError):
    """The object store failed in a way retries did not fix."""

    code, http_status, errno, exit_code = "storage_error", 502, _errno.EIO, 7


class TransientStorageError(StorageError):
    """Throttling, 5xx or a timeout: worth retrying with backoff."""

    code, http_status = "storage_unavailable", 503


class Busy(DatahubError):
    """The server is at a capacity limit (e.g. request bodies in flight): retry after a moment."""

    code, http_status, errno, exit_code = "busy", 503, _errno.EAGAIN, 7  # retry later: never exit 1, "a bug"


class CatalogUnavailable(DatahubError):
    """A remote catalog (``catalog_url = http(s)://...``) that stayed unreachable, slow or
    answering garbage through the client's bounded retries; the message names its URL."""

    code, http_status, errno, exit_code = "catalog_unavailable", 503, _errno.EIO, 7


class ListingUnavailable(DatahubError):
    """A mount's listing has not reached a name because loading it failed (the catalog or
    the bucket did not answer). Not ENOENT: the name may well exist, and a training job must
    not skip it as missing. The mount keeps retrying; the message names the version or
    directory and the cause."""

    code, http_status, errno, exit_code = "listing_unavailable", 503, _errno.EIO, 7


class NoSpace(DatahubError):
    code, http_status, errno, exit_code = "no_space", 507, _errno.ENOSPC, 7


class Cancelled(DatahubError):
    code, http_status, errno, exit_code = "cancelled", 499, _errno.EINTR, 130


# --- pack and task queue -------------------------------------------------------------------------
class BadImage(InvalidInput):
    """An image record that cannot be decoded (corrupt, truncated, zero bytes); names the key."""

    code = "bad_image"


class ImageTooLarge(BadImage):
    """An image whose pixel count exceeds the decompression-bomb limit; names the key."""

    code = "image_too_large"


class JobNotFound(NotFound):
    code = "job_not_found"


# How a task job of each kind (its meta's "kind") is made, for the message of a missing one.
_JOB_MAKERS = {
    "pack": "start it with `datahub pack SRC@REF --to DST` (its job id is printed by --plan-only)",
    "epoch": "create it with shard_epoch(queue, {job!r}, dataset) before iterating the "
    "TaskStream (docs/torch.md, TaskStream)",
}


def job_not_found(job: str, kind: str = "") -> JobNotFound:
    """A missing task job, naming how a job of ``kind`` is made. Why a kind: the queue (and
    the API in front of it) cannot know what a missing job was to be, and told every caller to
    run `datahub pack`, which makes pack jobs only, never a TaskStream's epoch. Without one the
    message names every way."""
    if kind in _JOB_MAKERS:
        how = _JOB_MAKERS[kind].format(job=job)
    else:
        how = (
            "a pack job is started by `datahub pack SRC@REF --to DST`; a TaskStream's epoch is "
            "created by shard_epoch(queue, JOB, dataset) (docs/torch.md)"
        )
    return JobNotFound(f"task job {job!r} not found: {how}", job=job, **({"kind": kind} if kind else {}))


class JobFinished(Conflict):
    """A task job that is over (every task done, or failed) was asked for more work by a
    reader that already saw it over: a TaskStream iterated for a second epoch."""

    code = "job_finished"


class LeaseLost(Conflict):
    """A worker no longer holds a task's lease (it expired and another worker took the task)."""

    code = "lease_lost"


def error_for_exit_code(exit_code: int | None, message: str) -> DatahubError:
    """The error a child ``datahub`` process reported by its exit code, to re-raise in the parent.

    A background mount re-executes itself; its exit code (4: a workspace open elsewhere)
    must reach the caller unchanged, not as a generic failure (1).
    """
    for cls in (InvalidInput, NotFound, Conflict, ObjectChanged, AccessDenied, StorageError):
        if cls.exit_code == exit_code:
            return cls(message)
    return DatahubError(message)
