"""Fill the MongoDB directory table (``mongo_dirs``) of a dataset committed before it existed.

Why a pass of its own: a dataset made by an older datahub has no ``dirs`` documents, and it
lists the old way (no ``dirs: true`` on its ``datasets`` document) until this has run. The
walk is SQLite's (``sqlite_dirs_backfill``: one pass over the dataset's revisions in key
order with a stack of the directories that hold the current key); what differs is how it
is stored and fenced without transactions:

- **Resumable**: every ``CHECKPOINT_ROWS`` revisions the finished directories' documents are
  inserted (a repeat is a duplicate-key no-op), then the cursor and stack are saved in
  ``dirs_backfill/{dataset}``, so a pass killed halfway goes on from its last checkpoint.
- **Nothing half-done**: the flag is set only at the end, while the pass holds the commit
  claim of ``head + 1`` (the protocol's own, ``mongo_commit``): no commit can publish
  between the check that the head has not moved and the flag, and a commit claims after the
  flag is set, so it keeps the table. A pass whose claim was taken over (it stalled past its
  lease) takes the flag back, and one whose claim a commit took over does not set it once
  that commit has read it unset (the flag is set only while the dataset's ``dirs_read``, the
  epoch of the last commit that read it, is not above the pass's own). A commit during the
  pass (the head moved: that commit did not keep the half-filled table) makes the pass start
  the dataset over.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from datahub.catalog.mongo_commit import _insert_new
from datahub.catalog.sqlite_dirs_backfill import (
    CHECKPOINT_ROWS,
    Progress,
    _dump_stack,
    _Frame,
    _load_stack,
    run_pass,
    walk,
)
from datahub.errors import Conflict, StaleBase

_READ_ROWS = 20_000  # revisions per read


def backfill(
    store: Any, dataset: str, *, progress: Progress | None = None, checkpoint_rows: int = CHECKPOINT_ROWS
) -> bool:
    """Fill the directory table of one dataset and mark it complete; False when a commit to
    the dataset made the pass start over (the caller runs it again). Resumes a killed pass.
    ``store`` is a ``MongoCatalogStore`` (its collections and its commit claim)."""
    if (store.datasets.find_one({"_id": dataset}, {"dirs": 1}) or {}).get("dirs"):
        return True  # done already (a new dataset's commits keep it)
    head = store.head(dataset)  # finishes a commit that died publishing
    saved = store.dirs_backfill.find_one({"_id": dataset})
    if saved is None or saved["head"] != head:  # a fresh pass (or one a commit made stale)
        store.dirs.delete_many({"dataset": dataset})
        store.dirs_backfill.replace_one(
            {"_id": dataset}, {"head": head, "cursor": "", "stack": "[]", "done": 0}, upsert=True
        )
        cursor, stack, done = "", [], 0
    else:
        cursor, stack, done = saved["cursor"], _load_stack(saved["stack"]), saved["done"]
    total = sum(v.get("added", 0) + v.get("modified", 0) for v in store.versions.find({"dataset": dataset}))
    return run_pass(
        dataset,
        walk_from=lambda finished: walk(
            _rows(store.records, dataset, cursor), stack, finished, None, done, checkpoint_rows
        ),
        checkpoint=lambda key, rows_done, finished: _checkpoint(
            store, dataset, head, key, stack, rows_done, finished
        ),
        complete=lambda finished: _complete(store, dataset, head, finished),
        start=done,
        total=total,
        progress=progress,
    )


def backfill_all(store: Any, *, progress: Progress | None = None) -> list[str]:
    """Fill the directory table of every dataset that has none yet (in name order); a pass
    that a commit made stale is run again. Returns the datasets filled."""
    filled = []
    names = [d["_id"] for d in store.datasets.find({"dirs": {"$ne": True}}, {"_id": 1}).sort("_id", 1)]
    for name in names:
        while not backfill(store, name, progress=progress):
            pass  # a commit landed during the pass: over again on the new head
        filled.append(name)
    return filled


def _rows(records: Any, dataset: str, cursor: str) -> Iterator[tuple[str, int, int]]:
    """Every revision of the dataset above key ``cursor``, in (key, from_seq) order: pages by
    key, the revisions of a page's last key read whole before the next page."""
    fields = {"_id": 0, "key": 1, "from_seq": 1, "to_seq": 1}
    order = [("key", 1), ("from_seq", 1)]
    after = cursor
    while True:
        query = {"dataset": dataset, "key": {"$gt": after}}
        docs = list(records.find(query, fields).sort(order).hint("by_key").limit(_READ_ROWS))
        full = len(docs) == _READ_ROWS
        if full:  # the last key may have more revisions: read them whole
            after = docs[-1]["key"]
            docs = [d for d in docs if d["key"] != after]
            docs += records.find({"dataset": dataset, "key": after}, fields).sort(order).hint("by_key")
        yield from ((d["key"], d["from_seq"], d["to_seq"]) for d in docs)
        if not full:
            return


def _docs(dataset: str, head: int, finished: list[tuple]) -> list[dict[str, Any]]:
    """The ``dirs`` documents of the finished directories' rows (``seq``: the head they
    were read at, below every commit that may write them later)."""
    return [
        {
            "dataset": dataset,
            "parent": parent,
            "path": path,
            "from_seq": start,
            "to_seq": end,
            "live": live,
            "seq": head,
        }  # fmt: skip
        for _, parent, path, start, end, live in finished
    ]


def _insert(store: Any, docs: list[dict[str, Any]]) -> None:
    if docs:
        _insert_new(store.dirs, docs)


def _still(store: Any, dataset: str, head: int) -> bool:
    """Whether this pass may go on: its progress document is there and no commit moved the head."""
    saved = store.dirs_backfill.find_one({"_id": dataset}, {"head": 1})
    return saved is not None and saved["head"] == head == store._head(dataset)


def _checkpoint(
    store: Any, dataset: str, head: int, cursor: str, stack: list[_Frame], done: int, finished: list[tuple]
) -> bool:
    """Store the finished documents, then where the pass is; False if stale."""
    if not _still(store, dataset, head):
        return False
    _insert(store, _docs(dataset, head, finished))
    store.dirs_backfill.update_one(
        {"_id": dataset, "head": head},
        {"$set": {"cursor": cursor, "stack": _dump_stack(stack), "done": done}},
    )
    return True


def _complete(store: Any, dataset: str, head: int, finished: list[tuple]) -> bool:
    """Write the last documents and set the flag under the claim of ``head + 1``; False when
    the head moved (or the claim was lost before the flag was known to hold)."""
    try:
        claim = store._claim(dataset, head + 1, head, None)
    except StaleBase:
        return False
    try:
        if not _still(store, dataset, head):
            return False
        _insert(store, _docs(dataset, head, finished))
        # only if no commit with a later claim (one that took ours over) read the flag unset:
        # that commit keeps no table (mongo_commit._directory_states)
        unread = {
            "_id": dataset,
            "$or": [{"dirs_read": {"$exists": False}}, {"dirs_read": {"$lte": claim.epoch}}],
        }
        if not store.datasets.update_one(unread, {"$set": {"dirs": True}}).matched_count:
            return False
        store.dirs_backfill.delete_one({"_id": dataset})
        try:
            store._renew(claim)  # fenced: still ours, so no commit claimed before the flag
        except Conflict:  # taken over: that commit may not have kept the table; over again
            store.datasets.update_one({"_id": dataset}, {"$set": {"dirs": False}})
            return False
    finally:
        store._abandon(claim)
    return True
