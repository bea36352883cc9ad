"""The independent checker: the clients' histories and the catalog's own database against
what the system served, after the run and the heal.

Nothing here asks datahub whether it did well. The inputs are the event logs the clients
wrote (acknowledgements fsync'd as they came), the manifest written before the run, the
catalog's SQLite file read directly with ``sqlite3``, the bytes a node read back for every
version (``bench.soak.verify``), and the origin's bytes fetched straight from the object
server. Each function returns a list of violations (strings naming what, where and which
seed-independent detail), empty when the promise held.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bench.soak.errors import is_clean

EMPTY = hashlib.sha256(b"").hexdigest()
STALL_BUDGET = 30.0  # seconds: the documented budget of a read or an open


# --- workspaces ---------------------------------------------------------------------------------
Model = dict[str, set]  # path -> the contents it may have (sha256 hex, or None: absent)


def workspace_models(events: Iterable[dict]) -> dict[tuple[str, int], Model]:
    """Each (node, cycle)'s files: the contents each may have, rebuilt from a writer's history.

    An acknowledged close/fsync/rename/unlink makes the state certain. A failed operation
    leaves every state it could have produced: what was acknowledged before, the new
    contents, the acknowledged prefix, an empty file (created or truncated, nothing written
    yet), and absence for a file never acknowledged or one a full device discarded
    (ENOSPC, docs/fuse.md). Never any other bytes: a torn file is a violation.
    """
    models: dict[tuple[str, int], Model] = defaultdict(dict)
    pending: dict[tuple[str, int, str], dict] = {}
    for ev in events:
        if "op" not in ev or ev["op"] == "paused":
            continue
        key = (ev["node"], ev["cycle"])
        model, path = models[key], ev["path"]
        op = ev["op"]
        if op == "intent":
            pending[(*key, path)] = ev
            continue
        intent = pending.get((*key, path), {})
        kind = intent.get("kind")
        if op == "ack":
            if ev["at"] in ("fsync", "close"):
                model[path] = {ev["sha"]}
            elif ev["at"] == "rename":
                model[ev["to"]] = model.get(path, {None})
                model[path] = {None}
            elif ev["at"] == "unlink":
                model[path] = {None}
        elif op == "fail":
            before = model.get(path, {None})
            if kind in ("create", "overwrite"):
                allowed = set(before) | {intent["sha"], EMPTY}
                if intent.get("prefix"):
                    allowed.add(intent["prefix"])
                if kind == "create":  # a close that fails for space reverts an overwrite to
                    allowed.add(None)  # its acknowledged contents (docs/writeback.md)
                model[path] = allowed
            elif kind == "rename":
                model[ev["to"]] = model.get(ev["to"], {None}) | before
                model[path] = before | {None}
            elif kind == "delete":
                model[path] = before | {None}
    return dict(models)


def acknowledged(events: Iterable[dict]) -> int:
    """How many close()/fsync() acknowledgements the writers logged."""
    return sum(1 for ev in events if ev.get("op") == "ack" and ev.get("at") in ("close", "fsync"))


def check_workspace_version(
    where: str,
    model: Model,
    read: dict[str, str],
    records: dict[str, dict] | None = None,
    parent: dict[str, dict] | None = None,
) -> list[str]:
    """``read``: key -> sha256 of the committed version's bytes as a node read them.

    ``records``/``parent``: the catalog's records of this version and of its parent. A
    workspace commit applies the workspace's own changes to the head (docs/writeback.md,
    merge17): a file the workspace does not hold (never written in this cycle, or absent after
    a failed write) stays exactly as the parent version had it, and is never dropped."""
    records, parent = records or {}, parent or {}
    bad = []
    for path, allowed in sorted(model.items()):
        if path not in read and None not in allowed:
            bad.append(f"{where}: acknowledged file {path} is missing from the committed version")
    for key in sorted(parent.keys() - records.keys()):
        if key not in model:
            bad.append(f"{where}: {key} of the parent version was dropped by a workspace that never held it")
    for key, sha in sorted(read.items()):
        allowed = model.get(key)
        if (allowed is None or None in allowed) and key in parent and records.get(key) == parent[key]:
            continue  # the parent's file, which this workspace does not hold: kept as it was
        if allowed is None:
            bad.append(f"{where}: {key} is in the committed version but was never written")
        elif sha not in allowed:
            bad.append(
                f"{where}: {key} has bytes (sha256 {sha[:12]}) no acknowledged or attempted write left"
            )
    return bad


# --- reads -------------------------------------------------------------------------------------
@dataclass
class ReadStats:
    reads: int = 0
    verified: int = 0
    bytes: int = 0
    wrong: int = 0
    errors: Counter = field(default_factory=Counter)
    by_node: Counter = field(default_factory=Counter)
    longest: float = 0.0
    longest_what: str = ""
    violations: list[str] = field(default_factory=list)
    #: (node, via) -> wall-clock windows in which that node's daemon was killed and not yet
    #: serving again: a path read then finds the bare mount point directory (ENOENT)
    gaps: dict[tuple[str, str], list[tuple[float, float]]] = field(default_factory=dict)

    def _in_gap(self, ev: dict) -> bool:
        return any(lo <= ev["t"] <= hi for lo, hi in self.gaps.get((ev["node"], ev["via"]), []))

    def add(self, ev: dict) -> None:
        if "via" not in ev or ev.get("done"):
            return
        self.reads += 1
        what = f"{ev['node']} {ev['via']} {ev.get('ds')}@{ev.get('v')}/{ev.get('key')}"
        if ev.get("dt", 0.0) > self.longest:
            self.longest, self.longest_what = ev["dt"], what
        if ev.get("dt", 0.0) > STALL_BUDGET:
            self.violations.append(f"read stalled {ev['dt']:.1f} s (budget {STALL_BUDGET:.0f} s): {what}")
        if ev.get("wrong"):
            self.wrong += 1
            self.violations.append(f"wrong bytes: {what} at t={ev['t']:.3f}")
        elif ev.get("ok"):
            self.verified += 1
            self.bytes += ev.get("bytes", 0)
            self.by_node[ev["node"]] += 1
        else:
            self.errors[ev["err"]] += 1
            if not is_clean(ev["err"]):
                self.violations.append(f"unclean error {ev['err']}: {what}")
            elif ev["err"] == "errno:ENOENT" and not self._in_gap(ev):
                self.violations.append(f"ENOENT for a file the version holds, outside a remount: {what}")


def op_stalls(events: Iterable[dict]) -> tuple[float, str, list[str]]:
    """A writer's operations from intent to ack/fail: the longest, and those past the budget."""
    started: dict[tuple, float] = {}
    longest, what, bad = 0.0, "", []
    for ev in events:
        if ev.get("op") == "intent":
            started[(ev["node"], ev["cycle"], ev["path"])] = ev["t"]
        elif ev.get("op") in ("ack", "fail") and ev.get("at") != "fsync":
            t0 = started.pop((ev["node"], ev["cycle"], ev["path"]), None)
            if t0 is None:
                continue
            dt = ev["t"] - t0
            label = f"{ev['node']} workspace {ev['path']} ({ev['op']})"
            if dt > longest:
                longest, what = dt, label
            if dt > STALL_BUDGET:
                bad.append(f"workspace operation stalled {dt:.1f} s: {label}")
    return longest, what, bad


def api_errors(events: Iterable[dict]) -> tuple[Counter, Counter, list[str]]:
    """API calls by outcome and errors by kind; an error without a clean kind is a violation."""
    calls, errors, bad = Counter(), Counter(), []
    for ev in events:
        if "api" not in ev or ev["api"] == "done":
            continue
        calls[f"{ev['api']}:{'ok' if ev['ok'] else 'error'}"] += 1
        if not ev["ok"]:
            errors[ev["err"]] += 1
            if not is_clean(ev["err"]):
                bad.append(f"{ev['node']} API {ev['api']}: {ev['err']}")
    return calls, errors, bad


# --- the catalog ---------------------------------------------------------------------------------
@dataclass
class CatalogDump:
    versions: dict[str, list[dict]]  # dataset -> versions by seq
    tags: dict[str, dict[str, int]]  # dataset -> tag -> seq
    records: dict[tuple[str, int], dict[str, dict]]  # (dataset, seq) -> key -> record


def read_catalog(db: Path) -> CatalogDump:
    """The catalog's SQLite file, read only with plain SQL (the service is stopped)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        names = dict(con.execute("SELECT id, name FROM datasets"))
        versions: dict[str, list[dict]] = {name: [] for name in names.values()}
        cols = "dataset_id, seq, parent, message, record_count, total_bytes, commit_id"
        for row in con.execute(f"SELECT {cols} FROM versions ORDER BY dataset_id, seq"):
            d = dict(zip(cols.split(", "), row, strict=True))
            versions[names[d.pop("dataset_id")]].append(d)
        tags: dict[str, dict[str, int]] = defaultdict(dict)
        for ds_id, tag, seq in con.execute("SELECT dataset_id, tag, seq FROM tags"):
            tags[names[ds_id]][tag] = seq
        records: dict[tuple[str, int], dict[str, dict]] = {}
        rows = list(con.execute("SELECT dataset_id, key, from_seq, to_seq, url, etag, size FROM records"))
        for name_id, name in names.items():
            for v in versions[name]:
                seq = v["seq"]
                records[(name, seq)] = {
                    key: {"url": url, "etag": etag, "size": size}
                    for ds_id, key, lo, hi, url, etag, size in rows
                    if ds_id == name_id and lo <= seq < hi
                }
        return CatalogDump(versions, dict(tags), records)
    finally:
        con.close()


def check_catalog(dump: CatalogDump) -> list[str]:
    """Versions linear per dataset, commit ids unique, tags on existing versions, and each
    version's record count and bytes equal to the records live in it."""
    bad = []
    seen_ids: dict[str, str] = {}
    for name, versions in sorted(dump.versions.items()):
        seqs = [v["seq"] for v in versions]
        if seqs != list(range(1, len(seqs) + 1)):
            bad.append(f"dataset {name}: versions are not 1..{len(seqs)}: {seqs}")
        for v in versions:
            want_parent = v["seq"] - 1 if v["seq"] > 1 else None
            if v["parent"] not in (want_parent, 0 if want_parent is None else want_parent):
                bad.append(f"{name}@{v['seq']}: parent {v['parent']}, not {want_parent} (a fork)")
            cid = v["commit_id"]
            if cid:
                where = f"{name}@{v['seq']}"
                if cid in seen_ids:
                    bad.append(f"commit id {cid} is used twice: {seen_ids[cid]} and {where}")
                seen_ids[cid] = where
            live = dump.records.get((name, v["seq"]), {})
            if len(live) != v["record_count"] or sum(r["size"] for r in live.values()) != v["total_bytes"]:
                bad.append(
                    f"{name}@{v['seq']}: says {v['record_count']} records / {v['total_bytes']} B, "
                    f"holds {len(live)} / {sum(r['size'] for r in live.values())} B"
                )
        for tag, seq in sorted(dump.tags.get(name, {}).items()):
            if seq not in seqs:
                bad.append(f"tag {name}:{tag} points at missing version {seq}")
    return bad
