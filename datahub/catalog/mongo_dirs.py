"""The MongoDB catalog's directory table: every directory of a dataset with the versions it is
live in, kept inside the commit protocol, so a listing steps from subdirectory to subdirectory.

Why (issue 38, docs/catalog.md "The directory table on MongoDB"): ``records`` is ordered by
key, and an old version's directory level lies among the revisions of every later version;
listing it used to step over all of them. This is the same table as SQLite's
(``sqlite_dirs``), in documents of ``dirs``: one per directory path and live interval
``[from_seq, to_seq)``, with ``live`` (the count of its live entries at the head, on the open
document only) and ``seq`` (the last commit that wrote the document).

Why a form of its own here: a Mongo commit stages its changes under its claim's epoch and
any number of processes may roll them forward, any number of times, after the one atomic
flip (``mongo_commit.py``). So a commit never adds deltas to ``dirs``: while it stages, it
resolves its per-directory deltas against the head into each touched directory's *final
state* (``staged_dirs``: the open interval it had at the base, if any, and its live count at
the new version), and the roll-forward writes those states. Writing a state is idempotent;
each write is filtered on ``seq <= new``, so a late repeat of an older commit's roll-forward
cannot set back what a newer one wrote. A dataset uses the table only when its ``datasets``
document has ``dirs: true``: new datasets, and old ones once ``mongo_dirs_backfill`` has
filled it.

pymongo is not imported here (its homes are ``mongo_store``, ``mongo_commit``,
``mongo_schema``): the collections and the protocol's retrying step are passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from datahub.catalog.revisions import OPEN
from datahub.catalog.sqlite_dirs import PendingCounts, gap_bounds, parent_of
from datahub.catalog.store import Gap

log = logging.getLogger(__name__)


STATES_PER_QUERY = 1000  # directories whose staged states one query reads or replaces


class Inconsistent(Exception):
    """The table's counts do not fit the commit's changes."""


class StagedDirectories(PendingCounts):
    """A commit's changes to its dataset's directory table, staged under the claim's epoch.

    ``add(appeared, vanished)`` per planned batch; ``flush()`` when ``pending()`` and once at
    the end resolves the deltas into ``staged_dirs`` states, a level at a time, deepest first
    (``PendingCounts``). ``retrying`` runs one idempotent step (the protocol's retry of
    transient errors)."""

    def __init__(
        self,
        dirs: Any,
        staged_dirs: Any,
        dataset: str,
        seq: int,
        epoch: int,
        retrying: Callable[[Callable[[], Any]], Any],
    ) -> None:
        super().__init__()
        self._dirs, self._staged = dirs, staged_dirs
        self._dataset, self._seq, self._epoch = dataset, seq, epoch
        self._retrying = retrying

    def flush(self) -> None:
        """Resolve the accumulated deltas into staged states; Inconsistent when a directory
        would hold fewer than 0 entries (the table does not fit the records)."""
        self._resolve(self._level)

    def _level(self, level: dict[str, int]) -> dict[str, int]:
        """Stage one level's new states; per directory +1/-1 when it appeared/emptied, else 0.
        ``STATES_PER_QUERY`` paths at a time: 20,000 paths of up to 1 KiB in one ``$in`` would
        pass the server's 16 MiB limit on a command."""
        changes = {}
        paths = list(level)
        for start in range(0, len(paths), STATES_PER_QUERY):
            states = self._states(paths[start : start + STATES_PER_QUERY])
            for path, (base_from, live) in list(states.items()):
                now = live + level[path]
                if now < 0:
                    raise Inconsistent(f"directory {path!r}: more entries removed than it held")
                states[path] = (base_from, now)
                changes[path] = (now > 0) - (live > 0)
            self._write(states)
        return changes

    def _mine(self) -> dict[str, Any]:
        return {"dataset": self._dataset, "seq": self._seq, "epoch": self._epoch}

    def _states(self, paths: list[str]) -> dict[str, tuple[int | None, int]]:
        """Per path: (the from_seq of its interval open at the base, or None; its live count
        as this commit left it so far)."""
        query = self._mine() | {"path": {"$in": paths}}
        staged = self._retrying(
            lambda: list(self._staged.find(query, {"_id": 0, "path": 1, "base_from": 1, "live": 1}))
        )
        states: dict[str, tuple[int | None, int]] = {d["path"]: (d["base_from"], d["live"]) for d in staged}
        rest = [p for p in paths if p not in states]
        if rest:
            head = {"dataset": self._dataset, "path": {"$in": rest}, "to_seq": OPEN}
            fields = {"_id": 0, "path": 1, "from_seq": 1, "live": 1}
            for d in self._retrying(lambda: list(self._dirs.find(head, fields))):
                states[d["path"]] = (d["from_seq"], d["live"])
        return {p: states.get(p, (None, 0)) for p in paths}

    def _write(self, states: dict[str, tuple[int | None, int]]) -> None:
        """Replace the paths' staged states by ``states``: a retried write leaves the same."""
        mine = self._mine()
        query = mine | {"path": {"$in": list(states)}}
        docs = [
            mine | {"path": path, "parent": parent_of(path), "base_from": base_from, "live": live}
            for path, (base_from, live) in states.items()
        ]

        def write() -> None:
            self._staged.delete_many(query)
            self._staged.insert_many(docs)

        self._retrying(write)


def state_writes(
    dataset: str, seq: int, states: list[dict[str, Any]]
) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], list[dict[str, Any]]]:
    """The ``dirs`` writes of a page of a commit's staged states: (filter, update) pairs for
    the intervals open at the base, and the documents of intervals the commit opens.

    Each sets a final state (never an increment), filtered on ``seq <= seq``, so writing it
    again changes nothing and a late writer of an older commit matches nothing that a newer
    one wrote; an insert of an interval already there is skipped by its unique index."""
    updates: list[tuple[dict[str, Any], dict[str, Any]]] = []
    inserts: list[dict[str, Any]] = []
    for state in states:
        path, base_from, live = state["path"], state["base_from"], state["live"]
        if base_from is None:
            if live:  # made by this commit (one made and emptied again was never live: nothing)
                inserts.append({"dataset": dataset, "parent": state["parent"], "path": path,
                                "from_seq": seq, "to_seq": OPEN, "live": live, "seq": seq})  # fmt: skip
            continue
        where = {"dataset": dataset, "path": path, "from_seq": base_from, "seq": {"$lte": seq}}
        ended = {} if live else {"to_seq": seq}  # emptied: its interval ends at this version
        updates.append((where, {"$set": {"live": live, "seq": seq} | ended}))
    return updates, inserts


def subdirectories(
    dirs: Any, dataset: str, seq: int, prefix: str, after: str, limit: int
) -> list[tuple[str, bool]]:
    """The subdirectories of ``prefix`` above ``after`` that any version had, in order, each
    once with whether it is live in ``seq``: at most ``limit`` of them.

    A path has one document per live interval: a page of documents is read in (path,
    from_seq) order, and the intervals of its last path are read whole before it counts."""
    found: dict[str, bool] = {}
    fields = {"_id": 0, "path": 1, "from_seq": 1, "to_seq": 1}
    order = [("path", 1), ("from_seq", 1)]
    while len(found) < limit:
        query = {"dataset": dataset, "parent": prefix, "path": {"$gt": after}}
        wanted = limit - len(found)
        docs = list(dirs.find(query, fields).sort(order).hint("by_parent").limit(wanted))
        if not docs:
            break
        last, full = docs[-1]["path"], len(docs) == wanted
        if full:  # the last path may have more intervals: read them whole
            docs = [d for d in docs if d["path"] != last]
            docs += dirs.find({"dataset": dataset, "parent": prefix, "path": last}, fields).hint("by_parent")
        for d in docs:
            found[d["path"]] = found.get(d["path"], False) or d["from_seq"] <= seq < d["to_seq"]
        if not full:
            break  # the level has no more
        after = last
    return list(found.items())


def gap_query(dataset: str, seq: int, prefix: str, gaps: list[Gap]) -> dict[str, Any]:
    """``sqlite_dirs.gap_pages``'s query on MongoDB: the live revisions in ``gaps`` of the level
    ``prefix``, an ``$or`` of one ``by_key`` range per gap (``gap_bounds``: short bounds, so
    257 gaps stay a small command). Sent hinted and sorted by key, it is one round trip."""
    live = {"from_seq": {"$lte": seq}, "to_seq": {"$gt": seq}}
    clauses = [
        {"dataset": dataset, "key": {"$gte": low} | ({} if high is None else {"$lt": high})} | live
        for low, high in gap_bounds(prefix, gaps)
    ]
    return clauses[0] if len(clauses) == 1 else {"$or": clauses}


def give_up(datasets: Any, dataset: str, why: str, retrying: Callable[[Callable[[], Any]], Any]) -> None:
    """A table whose counts do not fit the records (a defect, or documents edited by hand)
    must neither fail every commit nor answer listings: the dataset lists without it from
    now on, and ``datahub migrate`` fills it again (its fresh pass drops the old documents)."""
    log.warning(
        "dataset %r: its directory table does not match its records (%s); the dataset lists without "
        "it until `datahub migrate` fills it again",
        dataset,
        why,
    )
    retrying(lambda: datasets.update_one({"_id": dataset}, {"$set": {"dirs": False}}))
