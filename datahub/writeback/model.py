"""Plain data of the write-back core: attributes, modes and path rules; no I/O, no locks.

Every other module of the package may import this one; it imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from datahub.errors import InvalidKey, NameTooLong
from datahub.validation import MAX_KEY_BYTES, NAME_MAX, PLAIN_KEY, check_key, check_new_key

FILE_MODE = 0o644
DIR_MODE = 0o755
ID_BLOCK = 256  # file ids reserved per journal commit (creating a file commits nothing itself)


@dataclass(frozen=True, slots=True)
class FileAttr:
    size: int
    mtime: float
    is_dir: bool
    mode: int


@dataclass(slots=True)
class FileSettings:
    """What every open file of one workspace shares: the chunk size, the RAM budget of its
    buffers, how many write-behind uploads it may have in flight, and the clock of mtimes.
    One object per workspace, read live by its open files (a test may lower the budget)."""

    chunk_size: int
    buffer_bytes: int
    max_inflight: int
    clock: Callable[[], float]


def normalize(path: str) -> str:
    """``"/a/b/"`` -> ``"a/b"``; ``""`` or ``"/"`` is the root. Refuses ``..`` and friends."""
    path = path.strip("/")
    if len(path) <= MAX_KEY_BYTES and PLAIN_KEY.fullmatch(path):
        return path  # every rule of check_key holds for it: one C regex (small41: three a small file)
    return check_key(path) if path else ""


def new_name(path: str) -> str:
    """``normalize`` for a path that a create, mkdir or rename brings into the namespace, and
    what a new key may not be (``check_new_key``). Why (probe21): the journal keeps paths of up
    to 511 bytes, so a 256-byte name given through the API was acknowledged, and then its flush
    to a local origin failed forever (``File name too long``); FUSE never sends one (the kernel
    refuses it with ENAMETOOLONG, as ``NameTooLong`` does here). And (leftovers22) a name the
    catalog refuses as a new key (invisible format characters, a ``.datahub-hint-`` name) was
    acknowledged, and only the workspace's commit refused it. Lookups keep ``normalize``."""
    stripped = path.strip("/")
    if len(stripped) <= MAX_KEY_BYTES and PLAIN_KEY.fullmatch(stripped):
        return stripped  # every rule of check_new_key holds for it: one C regex
    path = normalize(path)
    if not path:
        return path
    if len(path) > NAME_MAX // 4:  # shorter, no segment can be over NAME_MAX bytes (UTF-8: 4 a character)
        for segment in path.split("/"):
            if len(segment.encode("utf-8", "surrogatepass")) > NAME_MAX:
                raise NameTooLong(
                    f"invalid path {path[:300]!r}: its name {segment[:40]!r}... is longer than "
                    f"{NAME_MAX} bytes, which no file system holds (a flush of it would fail); shorten it",
                    path=path,
                )
    try:
        return check_new_key(path)
    except InvalidKey as exc:
        raise InvalidKey(
            f"cannot bring {path!r} into the workspace: a commit of it would fail ({exc.message}); "
            "choose another name",
            path=path,
        ) from None


def parent_of(path: str) -> str:
    return path.rpartition("/")[0]


def new_record(mtime: float) -> dict:
    """The journal record of a created file nothing of which is acknowledged yet."""
    return {"size": 0, "mtime": mtime, "mode": FILE_MODE, "gen": 1, "chunks": {}}
