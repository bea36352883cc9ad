"""Where a workspace's flushed files are, for tests that read them straight from S3.

Each journal flushes under its own folder of the flush target, ``<target>/j-<journal id>/``
(docs/writeback.md, nodeloss18): a test that read ``objects/workspaces/<name>/<path>`` now
finds the one journal's folder first. A workspace that ran on two nodes has two folders;
these helpers refuse that (say which journal you mean instead).
"""

from __future__ import annotations

import re
from pathlib import Path

_FOLDER = re.compile(r"j-[0-9a-f]+/")


def strip_journal(keys: dict[str, bytes]) -> dict[str, bytes]:
    """``{path: bytes}`` from ``{j-<id>/path: bytes}`` keys of a target, all of one journal."""
    folders = {m.group(0) for key in keys if (m := _FOLDER.match(key))}
    assert len(folders) <= 1 and all(_FOLDER.match(key) for key in keys), sorted(keys)
    return {_FOLDER.sub("", key, count=1): data for key, data in keys.items()}


def workspace_object_key(client, bucket: str, workspace: str, path: str, objects: str = "objects") -> str:
    """The S3 key of ``path`` as the workspace's one journal flushed it under the default
    target (``<objects>/workspaces/<workspace>/j-<id>/<path>``), found by listing."""
    prefix = f"{objects}/workspaces/{workspace}/"
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    found = [
        k for k in keys if _FOLDER.fullmatch(k[len(prefix) : -len(path)] or "") and k.endswith(f"/{path}")
    ]
    assert len(found) == 1, (path, keys)
    return found[0]


def copies(folder: Path, path: str) -> dict[str, bytes]:
    """Every object of ``path`` in local flush target ``folder``: straight under it (a journal
    from before) or in any journal's folder; ``{key: bytes}``. A test that a fenced node
    pushed nothing looks in every folder, not only the one it expects."""
    found = [folder / path, *folder.glob(f"j-*/{path}")] if folder.is_dir() else []
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in found if p.is_file()}


def only_copy(folder: Path, path: str) -> bytes:
    """The bytes of the one object of ``path`` in local flush target ``folder`` (``copies``)."""
    found = copies(folder, path)
    assert len(found) == 1, (path, sorted(found))
    return next(iter(found.values()))


def files(folder: Path) -> list[str]:
    """The paths of every object in local flush target ``folder``, journal folders stripped."""
    keys = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    return sorted(_FOLDER.sub("", key, count=1) for key in keys)


def s3_copies(client, bucket: str, prefix: str, path: str) -> dict[str, bytes]:
    """``copies`` of an S3 flush target ``prefix`` (``objects/workspaces/<name>/``)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    found = [k for k in keys if k[len(prefix) :] == path or _FOLDER.fullmatch(k[len(prefix) : -len(path)] or "x")
             and k.endswith(f"/{path}")]  # fmt: skip
    return {k[len(prefix) :]: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in found}
