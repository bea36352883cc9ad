"""The names that carry read-order hints to a mount: the sampler's next files, sent as lookups.

The wire format lives in the library because both sides speak it: ``datahub.torch`` (the
sender, in a training pod) and ``fuse_adapter.hints`` (the receiver, in the mount daemon).

Why lookups: a training pod sees only the mount (the CSI driver keeps the daemon, its
sockets and credentials on the node), and a read-only mount refuses every write,
``setxattr`` included. A LOOKUP is the one request that carries bytes from the reader to
the daemon, so a window of upcoming files travels as the names of nonexistent entries:

    <any directory of the mount>/.datahub-hint-<token>-<part>-<parts>-<ino>.<ino>...

(hexadecimal; inode numbers are what ``os.stat`` of each file returns, answered from the
kernel's cache once the file was looked up). The daemon answers ENOENT, which the kernel
does not cache, and once every part of a token has arrived it hands the files, in order,
to the cache's ``hint`` (datahub.cache: fetch ahead within ``hint_budget_bytes``). A new
token replaces an unfinished older one: only the latest window matters.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence

from datahub.validation import RESERVED_PREFIX

PREFIX = RESERVED_PREFIX  # docs/semantics.md: such names are never entries
NAME_MAX = 255
_tokens = itertools.count(1)


def encode(inodes: Sequence[int], token: int | None = None) -> list[str]:
    """The lookup names that carry ``inodes`` (in order), each at most NAME_MAX bytes."""
    token = (os.getpid() << 24 | next(_tokens) & 0xFFFFFF) if token is None else token
    parts: list[list[str]] = [[]]
    room = NAME_MAX - len(PREFIX) - len(f"{token:x}-ffff-ffff-")
    used = 0
    for ino in inodes:
        text = f"{ino:x}"
        if parts[-1] and used + 1 + len(text) > room:
            parts.append([])
            used = 0
        used += len(text) + (1 if parts[-1] else 0)
        parts[-1].append(text)
    if not parts[-1]:
        return []
    n = len(parts)
    return [f"{PREFIX}{token:x}-{i:x}-{n:x}-{'.'.join(p)}" for i, p in enumerate(parts)]


def decode(name: str) -> tuple[int, int, int, list[int]] | None:
    """(token, part, parts, inodes) of a hint name, or None if it is not a valid one."""
    if not name.startswith(PREFIX):
        return None
    try:
        token, part, parts, body = name[len(PREFIX) :].split("-", 3)
        values = int(token, 16), int(part, 16), int(parts, 16), [int(x, 16) for x in body.split(".")]
    except ValueError:
        return None
    if not 0 <= values[1] < values[2]:
        return None
    return values
