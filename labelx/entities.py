"""LabelX's plain data: users, projects, tasks and items as the store returns them.

Apart from the store so that the service, auth and export modules can name these types
without importing the SQL that produces them.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

ROLES = ("annotator", "reviewer", "admin")
ITEM_STATES = ("todo", "annotated", "skipped", "submitted", "accepted", "rejected")


@dataclass(frozen=True, slots=True)
class User:
    id: int
    name: str
    role: str  # "annotator" | "reviewer" | "admin"

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def can_review(self) -> bool:
        return self.role in ("admin", "reviewer")


@dataclass(frozen=True, slots=True)
class Project:
    id: int
    name: str
    dataset: str
    version: int
    prefix: str
    filter: str
    schema: dict[str, Any]
    task_size: int
    created_by: str
    created_at: float
    item_count: int
    # False for a project of a labelx.db made before items kept their version's label whatever
    # its shape: the service reads those labels from the catalog once (LabelStore._migrate)
    dataset_labels_read: bool


@dataclass(frozen=True, slots=True)
class Task:
    id: int
    project_id: int
    number: int
    assignee: int | None
    assignee_name: str | None = None


@dataclass(frozen=True, slots=True)
class Item:
    id: int
    project_id: int
    task_id: int
    position: int
    key: str
    url: str
    etag: str
    size: int
    original: Any  # the schema field's value already in the dataset version (or None)
    value: Any  # the current annotation (or None)
    status: str
    version: int
    annotated_by: int | None
    annotated_at: float | None
    reviewed_by: int | None
    comment: str | None
    suggestion: dict[str, Any] | None  # {"value": ..., "score": 0.9, "model": "resnet@3"}
    claimed_by: int | None
    claimed_until: float | None
    # the schema field's value in the dataset version as it is there, whether or not it fits the
    # schema (``original`` is None for ``"truck"`` in a cat/dog project; this is ``"truck"``)
    dataset_label: Any = None
    # the version of the project's dataset that holds this item's accepted label (its commit, or
    # the head that held it already); None while it is not committed
    exported_seq: int | None = None

    @property
    def dataset_label_fits(self) -> bool:
        """Whether the version's label is a value of the project's schema (or there is none)."""
        return self.dataset_label is None or self.original is not None


@dataclass(frozen=True, slots=True)
class NewItem:
    key: str
    url: str
    etag: str
    size: int
    original: Any = None
    dataset_label: Any = None


def dump_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), sort_keys=True)


def load_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


ITEM_COLUMNS = (
    "id, project_id, task_id, position, key, url, etag, size, original, value, status, version, "
    "annotated_by, annotated_at, reviewed_by, comment, suggestion, claimed_by, claimed_until, dataset_label, "
    "exported_seq"
)


def item_from_row(row: sqlite3.Row) -> Item:
    return Item(
        *row[:8],
        load_json(row[8]),
        load_json(row[9]),
        *row[10:16],
        load_json(row[16]),
        row[17],
        row[18],
        load_json(row[19]),
        row[20],
    )


def project_from_row(row: sqlite3.Row) -> Project:
    vals = list(row)
    vals[6] = json.loads(vals[6])
    vals[11] = bool(vals[11])
    return Project(*vals)
