"""LabelX persistence: projects, tasks and items (and, via ``labelx.accounts``, users,
sessions and tokens) in one SQLite file.

The store is the only module that speaks SQL. It keeps the two concurrency promises in
single statements, so they hold across threads and processes sharing the file:

- an atomic claim (``UPDATE ... WHERE claimed_by IS NULL OR lease expired``): two users
  cannot both take the same item or the same unassigned task;
- an optimistic version counter per item (``UPDATE ... WHERE version = ?``): a stale write
  raises Conflict (HTTP 409) and is never silently overwritten.

One connection per thread (WAL journal, busy timeout), so FastAPI's thread pool can read
while one writer commits. MongoDB support for LabelX is left for later (docs/labelx.md).
"""

from __future__ import annotations

import json
import math
import secrets
import shlex
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from datahub.errors import AlreadyExists, Conflict, InvalidInput, NotFound
from datahub.sqlite_pool import SQLiteConnections
from labelx.accounts import AccountRecords
from labelx.entities import (
    ITEM_COLUMNS,
    Item,
    NewItem,
    Project,
    Task,
    dump_json,
    item_from_row,
    load_json,
    project_from_row,
)

CLAIM_SECONDS = 600.0
_BATCH = 2000


def _unfinite_boxes(value: Any) -> list[str]:
    """Each box of a detection value with a number that is not finite, named as a person finds
    it on the page: its position (from 1), class and coordinates."""
    if not isinstance(value, list):
        return [f"the label {value!r}"]
    return [
        f"box {n} ({box.get('label')!r} at {box.get('bbox')})"
        if isinstance(box, dict)
        else f"box {n} ({box!r})"
        for n, box in enumerate(value, 1)
        if not _finite(box)
    ]


def _finite(value: Any) -> bool:
    """Whether every number in ``value`` (JSON as Python reads it) is finite."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(map(_finite, value.values()))
    if isinstance(value, list):
        return all(map(_finite, value))
    return True


_SCHEMA = """
CREATE TABLE IF NOT EXISTS users(
  id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, role TEXT NOT NULL,
  pw_hash TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS sessions(
  id_hash TEXT PRIMARY KEY, user_id INTEGER NOT NULL, csrf TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS tokens(
  token_hash TEXT PRIMARY KEY, user_id INTEGER NOT NULL, description TEXT NOT NULL, created_at REAL NOT NULL,
  expires_at REAL, made_by TEXT);
CREATE TABLE IF NOT EXISTS projects(
  id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, dataset TEXT NOT NULL, version INTEGER NOT NULL,
  prefix TEXT NOT NULL, filter TEXT NOT NULL, schema TEXT NOT NULL, task_size INTEGER NOT NULL,
  created_by TEXT NOT NULL, created_at REAL NOT NULL, item_count INTEGER NOT NULL DEFAULT 0,
  dataset_labels_read INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS members(
  project_id INTEGER NOT NULL, user_id INTEGER NOT NULL, PRIMARY KEY(project_id, user_id));
CREATE TABLE IF NOT EXISTS tasks(
  id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL, number INTEGER NOT NULL, assignee INTEGER,
  UNIQUE(project_id, number));
CREATE TABLE IF NOT EXISTS items(
  id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL, task_id INTEGER NOT NULL, position INTEGER NOT NULL,
  key TEXT NOT NULL, url TEXT NOT NULL, etag TEXT NOT NULL, size INTEGER NOT NULL,
  original TEXT, value TEXT, status TEXT NOT NULL DEFAULT 'todo', version INTEGER NOT NULL DEFAULT 0,
  annotated_by INTEGER, annotated_at REAL, reviewed_by INTEGER, reviewed_at REAL, comment TEXT,
  suggestion TEXT, claimed_by INTEGER, claimed_until REAL, exported_seq INTEGER, dataset_label TEXT);
CREATE INDEX IF NOT EXISTS items_task ON items(task_id, position);
CREATE UNIQUE INDEX IF NOT EXISTS items_key ON items(project_id, key);
CREATE INDEX IF NOT EXISTS items_status ON items(project_id, status);
CREATE TABLE IF NOT EXISTS sign_in_failures(
  kind TEXT NOT NULL, key TEXT NOT NULL, failures INTEGER NOT NULL, last_at REAL NOT NULL,
  locked_until REAL NOT NULL, PRIMARY KEY(kind, key));
CREATE INDEX IF NOT EXISTS sign_in_failures_age ON sign_in_failures(kind, last_at);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS exports(
  id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL, dataset TEXT NOT NULL, seq INTEGER NOT NULL,
  changed INTEGER NOT NULL, author TEXT NOT NULL, created_at REAL NOT NULL);
"""


class LabelStore(AccountRecords):
    """SQLite-backed LabelX state; ``LabelStore(":memory:")`` is not supported (one file, WAL)."""

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = str(path)
        self.clock = clock
        # FULL: an autosaved label must survive power loss ("nothing is lost")
        self._db = SQLiteConnections(self.path, synchronous="FULL", pragmas=("foreign_keys = ON",))
        try:
            self._conn().executescript(_SCHEMA)  # idempotent; executescript manages its own transaction
        except sqlite3.DatabaseError as exc:  # a directory, a file of something else, no permission
            self._db.close()
            raise InvalidInput(
                f"LabelX cannot open its database {self.path} ({exc}): it must be an SQLite file "
                "this user may read and write, or not exist yet (move aside what is there)",
                path=self.path,
            ) from exc
        self._migrate()

    def _migrate(self) -> None:
        """Bring a labelx.db made before ``items.dataset_label`` up to date (in one transaction,
        re-checked inside it, so two processes opening the same old file both succeed).

        Its projects are marked unread (``dataset_labels_read = 0``): their items' labels as
        the version has them are read from the catalog by the service on first use
        (``LabelService.project_for``); before, only a label that fitted the schema was kept."""
        with self._write() as db:
            columns = {row[1] for row in db.execute("PRAGMA table_info(items)")}
            if "dataset_label" not in columns:
                db.execute("ALTER TABLE items ADD COLUMN dataset_label TEXT")
                db.execute("UPDATE items SET dataset_label = original")  # what the file kept, until read
            columns = {row[1] for row in db.execute("PRAGMA table_info(tokens)")}
            if "expires_at" not in columns:  # tokens made before caller37 never expire (NULL)
                db.execute("ALTER TABLE tokens ADD COLUMN expires_at REAL")
            if "made_by" not in columns:  # the token that made it (caller44); before: not known (NULL)
                db.execute("ALTER TABLE tokens ADD COLUMN made_by TEXT")
            db.execute("CREATE INDEX IF NOT EXISTS tokens_made_by ON tokens(made_by)")
            columns = {row[1] for row in db.execute("PRAGMA table_info(projects)")}
            if "dataset_labels_read" not in columns:
                db.execute("ALTER TABLE projects ADD COLUMN dataset_labels_read INTEGER NOT NULL DEFAULT 0")
            db.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES('instance', ?)", (secrets.token_hex(8),)
            )
        if self._conn().execute("SELECT 1 FROM meta WHERE key='nonfinite_sent_back'").fetchone() is None:
            self.send_back_nonfinite()  # once per file: later rows of NaN come from no LabelX of ours

    def send_back_nonfinite(self, project_id: int | None = None) -> list[tuple[str, str, str]]:
        """Send back to annotation every item (of ``project_id``, or all) holding a box whose
        coordinates are not all finite numbers; returns (project, key, box) of each box taken
        out. Why: before ``LabelSchema._check_box`` refused them (newuser21), a box of NaN or
        Infinity was saved, and then every commit of its project failed in the catalog (not
        JSON), and its task page failed too (its JSON could not be written): a project's labels
        were stuck. Such a box has no place in the image, so no number can stand in for it. The
        item keeps its other boxes, is ``rejected`` (its annotator redraws it, a reviewer
        accepts it again) with a comment naming the box, and the rest of the project commits.
        A suggestion of such numbers (a model's output, not a person's) is dropped."""
        scope, args = ("AND project_id=?", (project_id,)) if project_id is not None else ("", ())
        unfinite = (
            "(value LIKE '%NaN%' OR value LIKE '%Infinity%' OR suggestion LIKE '%NaN%' OR "
            "suggestion LIKE '%Infinity%')"
        )
        # read first, outside a write transaction: a commit's scan does not hold up autosaves
        found = [r[0] for r in self._conn().execute(f"SELECT id FROM items WHERE {unfinite} {scope}", args)]
        sent: list[tuple[str, str, str]] = []
        if not found and project_id is not None:
            return sent
        with self._write() as db:
            rows = []
            for i in range(0, len(found), 500):
                part = found[i : i + 500]
                rows += db.execute(
                    "SELECT i.id, i.key, i.value, i.suggestion, i.status, i.comment, p.name FROM items i "
                    f"JOIN projects p ON p.id = i.project_id WHERE i.id IN ({','.join('?' * len(part))}) "
                    f"AND {unfinite.replace('value', 'i.value').replace('suggestion', 'i.suggestion')}",
                    part,
                ).fetchall()
            for item_id, key, value_text, sugg_text, status, comment, project in rows:
                suggestion = load_json(sugg_text)
                if not _finite(suggestion):
                    db.execute("UPDATE items SET suggestion=NULL WHERE id=?", (item_id,))
                value = load_json(value_text)
                if _finite(value):
                    continue  # "NaN" in a class name
                kept = [b for b in value if _finite(b)] if isinstance(value, list) else None
                gone = _unfinite_boxes(value)
                note = (
                    f"{' and '.join(gone)} had no place in the image (a coordinate was not a number: saved "
                    "before LabelX refused that) and was taken out; draw it again, the other boxes are kept"
                )
                db.execute(
                    "UPDATE items SET value=?, status=?, comment=?, version=version+1, exported_seq=NULL "
                    "WHERE id=?",
                    (dump_json(kept), "rejected" if status != "todo" else status,
                     note + (f". Earlier comment: {comment}" if comment else ""), item_id),
                )  # fmt: skip
                sent.extend((project, key, g) for g in gone)
            if project_id is None:
                db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('nonfinite_sent_back', '1')")
        return sent

    @property
    def instance(self) -> str:
        """This labelx.db's own random id, made once with the file. Why: each labelx.db numbers
        its projects from 1, so two of them over one catalog (two teams' LabelX, or one whose
        labelx.db was made anew) had the same project ids; a commit took the other's version as
        its own (the same commit id) and the other's labels as seen (the same ``project_id`` in
        the lineage), and replaced them without the refusal (docs/labelx.md, "Export")."""
        return self._conn().execute("SELECT value FROM meta WHERE key='instance'").fetchone()[0]

    # --- connections ---------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        return self._db.get()

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        """One immediate transaction: all or nothing (promise: nothing half-written)."""
        return self._db.immediate()

    def close(self) -> None:
        self._db.close()

    # --- projects ------------------------------------------------------------------------------
    def create_project(
        self,
        *,
        name: str,
        dataset: str,
        version: int,
        prefix: str,
        filter: str,
        schema: dict[str, Any],
        task_size: int,
        created_by: str,
        items: Iterable[NewItem],
        annotators: list[int],
        round_robin: bool = True,
    ) -> Project:
        """Insert a project with its tasks and items in ONE transaction (all or nothing).

        Items are streamed in batches; tasks of ``task_size`` items are assigned round-robin
        to ``annotators`` with ``round_robin``; otherwise left unassigned for the annotators
        (the project's members) to claim one at a time.
        """
        now = self.clock()
        try:
            with self._write() as db:
                pid = db.execute(
                    "INSERT INTO projects(name, dataset, version, prefix, filter, schema, task_size, "
                    "created_by, created_at, dataset_labels_read) VALUES(?,?,?,?,?,?,?,?,?,1)",
                    (name, dataset, version, prefix, filter, json.dumps(schema), task_size, created_by, now),
                ).lastrowid
                db.executemany(
                    "INSERT INTO members VALUES(?,?)", [(pid, uid) for uid in dict.fromkeys(annotators)]
                )
                count = 0
                task_id = 0
                batch: list[tuple] = []
                for item in items:
                    pos = count % task_size
                    if pos == 0:
                        number = count // task_size
                        assignee = (
                            annotators[number % len(annotators)] if annotators and round_robin else None
                        )
                        task_id = db.execute(
                            "INSERT INTO tasks(project_id, number, assignee) VALUES(?,?,?)",
                            (pid, number + 1, assignee),
                        ).lastrowid
                    batch.append(
                        (pid, task_id, pos, item.key, item.url, item.etag, item.size, dump_json(item.original),
                         dump_json(item.original), dump_json(item.dataset_label))
                    )  # fmt: skip
                    count += 1
                    if len(batch) >= _BATCH:
                        self._insert_items(db, batch)
                        batch = []
                self._insert_items(db, batch)
                if count == 0:
                    narrowed = [f"--prefix {shlex.quote(prefix)}"] if prefix else []
                    narrowed += [f"--filter {shlex.quote(filter)}"] if filter else []
                    listing = " ".join([f"datahub ls {dataset}@v{version}", *narrowed])
                    raise InvalidInput(
                        f"project {name!r} would be empty: no records of {dataset}@v{version} match "
                        f"the prefix/filter; check them with `{listing}`"
                    )
                db.execute("UPDATE projects SET item_count=? WHERE id=?", (count, pid))
        except sqlite3.IntegrityError as exc:
            raise AlreadyExists(f"project {name!r} already exists; pick another name", project=name) from exc
        return self.get_project(pid)

    @staticmethod
    def _insert_items(db: sqlite3.Connection, batch: list[tuple]) -> None:
        db.executemany(
            "INSERT INTO items(project_id, task_id, position, key, url, etag, size, original, value, "
            "dataset_label) VALUES(?,?,?,?,?,?,?,?,?,?)",
            batch,
        )

    def get_project(self, project_id: int) -> Project:
        row = self._conn().execute("SELECT * FROM projects WHERE id=?", (project_id,)).fetchone()
        if row is None:
            raise NotFound(f"no project with id {project_id}", project=project_id)
        return project_from_row(row)

    def project_by_name(self, name: str) -> Project:
        """The project of that name. Why a number not a name is answered with the name of the
        project of that id: `datahub labelx projects` lists each project's ID first, and its
        commands take the NAME; "no project named '1'" beside a list whose first row was ID 1
        read as a lost project (newuser29)."""
        row = self._conn().execute("SELECT * FROM projects WHERE name=?", (name,)).fetchone()
        if row is None:
            by_id = None
            if name.isascii() and name.isdigit() and len(name) < 19:
                by_id = self._conn().execute("SELECT name FROM projects WHERE id=?", (int(name),)).fetchone()
            hint = (
                f"; project {name} (its ID) is named {by_id[0]!r}: the commands take the NAME"
                if by_id
                else ""
            )
            raise NotFound(f"no project named {name!r}{hint}; list them with `datahub labelx projects`")
        return project_from_row(row)

    def list_projects(self, *, member: int | None = None) -> list[Project]:
        if member is None:
            rows = self._conn().execute("SELECT * FROM projects ORDER BY id")
        else:
            rows = self._conn().execute(
                "SELECT p.* FROM projects p WHERE p.id IN (SELECT project_id FROM members WHERE user_id=?) "
                "OR p.id IN (SELECT project_id FROM tasks WHERE assignee=?) ORDER BY p.id",
                (member, member),
            )
        return [project_from_row(r) for r in rows]

    def is_member(self, project_id: int, user_id: int) -> bool:
        return (
            self._conn()
            .execute(
                "SELECT 1 FROM members WHERE project_id=? AND user_id=? UNION "
                "SELECT 1 FROM tasks WHERE project_id=? AND assignee=?",
                (project_id, user_id, project_id, user_id),
            )
            .fetchone()
            is not None
        )

    def add_member(self, project_id: int, user_id: int) -> None:
        with self._write() as db:
            db.execute("INSERT OR IGNORE INTO members VALUES(?,?)", (project_id, user_id))

    # --- tasks ---------------------------------------------------------------------------------
    def list_tasks(self, project_id: int, *, assignee: int | None = None) -> list[dict[str, Any]]:
        """Tasks with their item counts per state (one grouped query)."""
        sql = (
            "SELECT t.id, t.number, t.assignee, u.name, i.status, COUNT(i.id) FROM tasks t "
            "LEFT JOIN users u ON u.id = t.assignee LEFT JOIN items i ON i.task_id = t.id "
            "WHERE t.project_id=?" + (" AND t.assignee=?" if assignee is not None else "") + " "
            "GROUP BY t.id, i.status ORDER BY t.number"
        )
        args = (project_id, assignee) if assignee is not None else (project_id,)
        tasks: dict[int, dict[str, Any]] = {}
        for tid, number, aid, aname, status, n in self._conn().execute(sql, args):
            t = tasks.setdefault(
                tid, {"id": tid, "number": number, "assignee": aname, "assignee_id": aid, "counts": {}}
            )
            if status:
                t["counts"][status] = n
        for t in tasks.values():
            t["total"] = sum(t["counts"].values())
        return list(tasks.values())

    def get_task(self, task_id: int) -> Task:
        row = (
            self._conn()
            .execute(
                "SELECT t.id, t.project_id, t.number, t.assignee, u.name FROM tasks t "
                "LEFT JOIN users u ON u.id = t.assignee WHERE t.id=?",
                (task_id,),
            )
            .fetchone()
        )
        if row is None:
            raise NotFound(f"no task with id {task_id}", task=task_id)
        return Task(*row)

    def claim_task(self, task_id: int, user_id: int) -> bool:
        """Atomically take an unassigned task; False if someone else holds it."""
        with self._write() as db:
            cur = db.execute(
                "UPDATE tasks SET assignee=? WHERE id=? AND (assignee IS NULL OR assignee=?)",
                (user_id, task_id, user_id),
            )
            return cur.rowcount == 1

    def next_open_task(self, project_id: int) -> int | None:
        row = (
            self._conn()
            .execute(
                "SELECT id FROM tasks WHERE project_id=? AND assignee IS NULL ORDER BY number LIMIT 1",
                (project_id,),
            )
            .fetchone()
        )
        return None if row is None else row[0]

    def assign_task(self, task_id: int, user_id: int | None) -> None:
        with self._write() as db:
            db.execute("UPDATE tasks SET assignee=? WHERE id=?", (user_id, task_id))

    # --- items ---------------------------------------------------------------------------------
    def task_items(self, task_id: int) -> list[Item]:
        rows = self._conn().execute(
            f"SELECT {ITEM_COLUMNS} FROM items WHERE task_id=? ORDER BY position", (task_id,)
        )
        return [item_from_row(r) for r in rows]

    def get_item(self, item_id: int) -> Item:
        row = self._conn().execute(f"SELECT {ITEM_COLUMNS} FROM items WHERE id=?", (item_id,)).fetchone()
        if row is None:
            raise NotFound(f"no item with id {item_id}", item=item_id)
        return item_from_row(row)

    def item_by_key(self, project_id: int, key: str) -> Item:
        row = (
            self._conn()
            .execute(f"SELECT {ITEM_COLUMNS} FROM items WHERE project_id=? AND key=?", (project_id, key))
            .fetchone()
        )
        if row is None:
            raise NotFound(f"project {project_id} has no item with key {key!r}", key=key)
        return item_from_row(row)

    def items_by_status(self, project_id: int, statuses: tuple[str, ...], *, limit: int = 100) -> list[Item]:
        marks = ",".join("?" * len(statuses))
        rows = self._conn().execute(
            f"SELECT {ITEM_COLUMNS} FROM items WHERE project_id=? AND status IN ({marks}) "
            "ORDER BY annotated_at, id LIMIT ?",
            (project_id, *statuses, limit),
        )
        return [item_from_row(r) for r in rows]

    def iter_items(
        self, project_id: int, statuses: tuple[str, ...] | None = None, *, changed_only: bool = False
    ) -> Iterator[Item]:
        """Stream a project's items in key order, in batches (bounded memory).

        ``changed_only``: accepted items not yet exported whose value differs from the
        version's (values are stored as canonical JSON, so text comparison is exact).
        """
        after = ""
        extra = f" AND status IN ({','.join('?' * len(statuses))})" if statuses else ""
        extra += " AND exported_seq IS NULL AND value IS NOT original" if changed_only else ""
        while True:
            rows = (
                self._conn()
                .execute(
                    f"SELECT {ITEM_COLUMNS} FROM items WHERE project_id=? AND key > ?{extra} ORDER BY key LIMIT ?",
                    (project_id, after, *(statuses or ()), _BATCH),
                )
                .fetchall()
            )
            if not rows:
                return
            for r in rows:
                yield item_from_row(r)
            after = rows[-1][4]

    def item_keys(self, project_id: int, *, after: str, limit: int) -> list[str]:
        """A page of a project's item keys in key order (bounded memory for a whole-project pass)."""
        rows = self._conn().execute(
            "SELECT key FROM items WHERE project_id=? AND key > ? ORDER BY key LIMIT ?",
            (project_id, after, limit),
        )
        return [r[0] for r in rows]

    def set_dataset_labels(self, project_id: int, labels: dict[str, Any], *, done: bool = False) -> None:
        """Store items' labels as the project's version has them (key -> raw value, or None);
        ``done`` marks the project read, so the migration of an old labelx.db runs once."""
        with self._write() as db:
            db.executemany(
                "UPDATE items SET dataset_label=? WHERE project_id=? AND key=?",
                [(dump_json(v), project_id, k) for k, v in labels.items()],
            )
            if done:
                db.execute("UPDATE projects SET dataset_labels_read=1 WHERE id=?", (project_id,))

    def count_changed(self, project_id: int, *, unfit_only: bool = False) -> int:
        """How many items ``iter_items(..., ("accepted",), changed_only=True)`` would yield;
        ``unfit_only``: of those, how many replace a version's label that does not fit the schema."""
        unfit = " AND original IS NULL AND dataset_label IS NOT NULL" if unfit_only else ""
        return (
            self._conn()
            .execute(
                "SELECT COUNT(*) FROM items WHERE project_id=? AND status='accepted' AND exported_seq IS NULL "
                "AND value IS NOT original" + unfit,
                (project_id,),
            )
            .fetchone()[0]
        )

    def claim_item(self, item_id: int, user_id: int) -> Item:
        """Atomically take an item for editing (a lease); Conflict if another user holds it."""
        now = self.clock()
        with self._write() as db:
            cur = db.execute(
                "UPDATE items SET claimed_by=?, claimed_until=? WHERE id=? AND "
                "(claimed_by IS NULL OR claimed_by=? OR claimed_until < ?)",
                (user_id, now + CLAIM_SECONDS, item_id, user_id, now),
            )
            if cur.rowcount == 0:
                holder = db.execute(
                    "SELECT u.name FROM items i JOIN users u ON u.id = i.claimed_by WHERE i.id=?", (item_id,)
                ).fetchone()
                if holder is None:
                    raise NotFound(f"no item with id {item_id}", item=item_id)
                raise Conflict(
                    f"item {item_id} is being edited by {holder[0]}; try again when they are done",
                    item=item_id,
                    holder=holder[0],
                )
        return self.get_item(item_id)

    def release_item(self, item_id: int, user_id: int) -> None:
        """Give up one's claim (leaving an item); someone else's claim is left alone."""
        with self._write() as db:
            db.execute(
                "UPDATE items SET claimed_by=NULL, claimed_until=NULL WHERE id=? AND claimed_by=?",
                (item_id, user_id),
            )

    def save_value(self, item_id: int, user_id: int, expected_version: int, value: Any, status: str) -> Item:
        """Write an annotation if ``expected_version`` is current and the caller holds the claim.

        Bumps the version; a stale version or someone else's claim raises Conflict (409).
        """
        now = self.clock()
        with self._write() as db:
            cur = db.execute(
                "UPDATE items SET value=?, status=?, version=version+1, annotated_by=?, annotated_at=?, "
                "claimed_by=?, claimed_until=?, exported_seq=NULL WHERE id=? AND version=? AND "
                "(claimed_by IS NULL OR claimed_by=? OR claimed_until < ?)",
                (dump_json(value), status, user_id, now, user_id, now + CLAIM_SECONDS, item_id,
                 expected_version, user_id, now),
            )  # fmt: skip
            if cur.rowcount == 0:
                row = db.execute(
                    "SELECT i.version, u.name FROM items i LEFT JOIN users u ON u.id = i.claimed_by "
                    "AND i.claimed_by != ? AND i.claimed_until >= ? WHERE i.id=?",
                    (user_id, now, item_id),
                ).fetchone()
                if row is None:
                    raise NotFound(f"no item with id {item_id}", item=item_id)
                if row[0] == expected_version and row[1] is not None:
                    # the same version: only the other user's claim stopped it; "changed since you
                    # loaded it (version 0, you had 0)" named neither them nor what to do (newuser22)
                    raise Conflict(
                        f"item {item_id} is being edited by {row[1]}; try again when they are done",
                        item=item_id,
                        holder=row[1],
                    )
                raise Conflict(
                    f"item {item_id} changed since you loaded it (version {row[0]}, you had "
                    f"{expected_version}) or another user is editing it; reload to see the latest labels",
                    item=item_id,
                    version=row[0],
                )
        return self.get_item(item_id)

    def submit_task(self, task_id: int) -> int:
        """Annotated items of a task go to review; returns how many."""
        with self._write() as db:
            return db.execute(
                "UPDATE items SET status='submitted', version=version+1, claimed_by=NULL, claimed_until=NULL "
                "WHERE task_id=? AND status='annotated'",
                (task_id,),
            ).rowcount

    def review(self, item_id: int, reviewer: int, expected_version: int, accept: bool, comment: str) -> Item:
        """Accept or reject a submitted item (version-checked like every write)."""
        with self._write() as db:
            cur = db.execute(
                "UPDATE items SET status=?, comment=?, reviewed_by=?, reviewed_at=?, version=version+1 "
                "WHERE id=? AND version=? AND status IN ('submitted', 'accepted', 'rejected')",
                ("accepted" if accept else "rejected", comment or None, reviewer, self.clock(), item_id,
                 expected_version),
            )  # fmt: skip
            if cur.rowcount == 0:
                row = db.execute(
                    "SELECT version, status, key, task_id FROM items WHERE id=?", (item_id,)
                ).fetchone()
                if row is None:
                    raise NotFound(f"no item with id {item_id}", item=item_id)
                if row[0] == expected_version:  # not changed since: not yet submitted for review
                    # said "cannot be reviewed now (status annotated, version 1, you had 1); reload
                    # the review queue": reloading changes nothing (newuser28)
                    raise Conflict(
                        f"item {item_id} ({row[2]!r}) is {row[1]}, not submitted: an item is reviewed "
                        f"once its task is submitted (the task page's Submit, POST /api/tasks/{row[3]}/submit)",
                        item=item_id,
                        status=row[1],
                    )
                raise Conflict(
                    f"item {item_id} cannot be reviewed now (status {row[1]}, version {row[0]}, you had "
                    f"{expected_version}); reload the review queue",
                    item=item_id,
                )
        return self.get_item(item_id)

    def set_suggestions(self, project_id: int, suggestions: Iterable[tuple[str, dict[str, Any]]]) -> int:
        """Attach suggestions by record key; returns how many items matched."""
        n = 0
        with self._write() as db:
            batch: list[tuple] = []
            for key, sug in suggestions:
                batch.append((dump_json(sug), project_id, key))
                if len(batch) >= _BATCH:
                    n += self._set_sugg(db, batch)
                    batch = []
            n += self._set_sugg(db, batch)
        return n

    def missing_keys(self, project_id: int, keys: Iterable[str]) -> list[str]:
        """The keys, once each and in the order given, that no item of the project has."""
        wanted = list(dict.fromkeys(keys))
        found: set[str] = set()
        for start in range(0, len(wanted), _BATCH):
            chunk = wanted[start : start + _BATCH]
            rows = self._conn().execute(
                f"SELECT key FROM items WHERE project_id=? AND key IN ({','.join('?' * len(chunk))})",
                (project_id, *chunk),
            )
            found.update(r[0] for r in rows)
        return [k for k in wanted if k not in found]

    @staticmethod
    def _set_sugg(db: sqlite3.Connection, batch: list[tuple]) -> int:
        before = db.total_changes
        db.executemany("UPDATE items SET suggestion=? WHERE project_id=? AND key=?", batch)
        return db.total_changes - before

    # --- export bookkeeping -----------------------------------------------------------------------
    def record_export(
        self, project_id: int, dataset: str, seq: int, exported: list[tuple[int, int]], author: str
    ) -> None:
        """Mark (item id, version) pairs exported; an item edited since keeps its new value unexported."""
        with self._write() as db:
            db.executemany(
                "UPDATE items SET exported_seq=? WHERE id=? AND version=?", [(seq, i, v) for i, v in exported]
            )
            db.execute(
                "INSERT INTO exports(project_id, dataset, seq, changed, author, created_at) VALUES(?,?,?,?,?,?)",
                (project_id, dataset, seq, len(exported), author, self.clock()),
            )

    def mark_held(self, exported: list[tuple[int, int]], seq: int) -> None:
        """Mark (item id, version) pairs as held by version ``seq`` of the project's dataset
        without recording an export: a version somebody else made already holds their labels,
        so no commit of the project writes them (it made an empty version). No ``exports`` row:
        those versions count as the project's own, whose labels it has seen."""
        with self._write() as db:
            db.executemany(
                "UPDATE items SET exported_seq=? WHERE id=? AND version=?", [(seq, i, v) for i, v in exported]
            )

    def list_exports(self, project_id: int) -> list[dict[str, Any]]:
        rows = self._conn().execute(
            "SELECT dataset, seq, changed, author, created_at FROM exports WHERE project_id=? ORDER BY id",
            (project_id,),
        )
        return [
            dict(zip(("dataset", "seq", "changed", "author", "created_at"), r, strict=True)) for r in rows
        ]

    # --- statistics ------------------------------------------------------------------------------
    def status_counts(self, project_id: int) -> dict[str, int]:
        rows = self._conn().execute(
            "SELECT status, COUNT(*) FROM items WHERE project_id=? GROUP BY status", (project_id,)
        )
        return dict(rows.fetchall())

    def per_annotator(self, project_id: int) -> list[tuple[str, str, int]]:
        """(annotator, status, count) for every annotated item."""
        return (
            self._conn()
            .execute(
                "SELECT u.name, i.status, COUNT(*) FROM items i JOIN users u ON u.id = i.annotated_by "
                "WHERE i.project_id=? GROUP BY u.name, i.status ORDER BY u.name",
                (project_id,),
            )
            .fetchall()
        )

    def per_hour(self, project_id: int, since: float) -> list[tuple[int, int]]:
        """(hour start, items annotated) for the hours since ``since``."""
        return (
            self._conn()
            .execute(
                "SELECT CAST(annotated_at / 3600 AS INTEGER) * 3600 AS h, COUNT(*) FROM items "
                "WHERE project_id=? AND annotated_at >= ? GROUP BY h ORDER BY h",
                (project_id, since),
            )
            .fetchall()
        )

    def labelled_values(self, project_id: int) -> Iterator[tuple[Any, Any, str]]:
        """(value, suggestion, status) of every item that has a value or a suggestion."""
        rows = self._conn().execute(
            "SELECT value, suggestion, status FROM items WHERE project_id=? AND "
            "(value IS NOT NULL OR suggestion IS NOT NULL)",
            (project_id,),
        )
        for value, sug, status in rows:
            yield load_json(value), load_json(sug), status
