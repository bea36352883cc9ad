"""The controller's memory: one record per volume CreateVolume made, kept in the catalog.

CSI makes CreateVolume idempotent *by name*: the same request again must return the same
volume, and a different request under a name already used must get ALREADY_EXISTS. That
needs state which outlives the controller process (a Deployment replica restarts, moves,
or is replaced by the next leader), so the records live next to the datasets: a
``csi_volumes`` table in the embedded SQLite catalog, or a ``csi_volumes`` collection in
MongoDB. They have their own table and their own connections: the catalog's store classes
and their commit protocol are untouched, and a record never takes part in a dataset commit.

A record is written in one statement (an insert that fails if the id is taken), so a
CreateVolume that fails leaves no record, and two racing CreateVolume calls for one name
end with one record, which both compare themselves against.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from datahub.errors import Conflict, InvalidInput, StorageError

TABLE = "csi_volumes"


@dataclass(frozen=True)
class VolumeRecord:
    """A provisioned volume: what was asked for (name, parameters, capacity) and what it owns."""

    volume_id: str
    name: str  # the CO's CreateVolume name (``pvc-<uid>`` from the external-provisioner)
    workspace: str  # the write-back workspace the volume owns (equal to volume_id today)
    parameters: dict[str, str] = field(default_factory=dict)
    capacity_bytes: int = 0  # the workspace's quota; 0 = no quota asked for
    created_at: float = 0.0

    def to_doc(self) -> dict[str, Any]:
        return {
            "volume_id": self.volume_id,
            "name": self.name,
            "workspace": self.workspace,
            "parameters": dict(self.parameters),
            "capacity_bytes": self.capacity_bytes,
            "created_at": self.created_at,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> VolumeRecord:
        return cls(
            volume_id=doc["volume_id"],
            name=doc["name"],
            workspace=doc["workspace"],
            parameters=dict(doc.get("parameters") or {}),
            capacity_bytes=int(doc.get("capacity_bytes") or 0),
            created_at=float(doc.get("created_at") or 0.0),
        )


class VolumeRecords(Protocol):
    def get(self, volume_id: str) -> VolumeRecord | None: ...

    def insert(self, record: VolumeRecord) -> VolumeRecord:
        """Store ``record`` unless its id is taken; return the record now stored under the id."""
        ...

    def delete(self, volume_id: str) -> bool:
        """Forget the record; False if there was none (DeleteVolume is idempotent)."""
        ...

    def list(self) -> list[VolumeRecord]: ...

    def close(self) -> None: ...


class SQLiteVolumeRecords:
    """``csi_volumes`` in the catalog's SQLite file (its own connections, WAL like the catalog)."""

    def __init__(self, path: str) -> None:
        from datahub.sqlite_pool import SQLiteConnections

        self.path = path
        self._db = SQLiteConnections(path, synchronous="FULL")
        with self._translate("create the volume records table"):
            self._db.get().execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (volume_id TEXT PRIMARY KEY, doc TEXT NOT NULL)"
            )

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise Conflict(f"{what}: the catalog {self.path} stayed busy; retry") from exc
            raise StorageError(f"{what}: SQLite error in {self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StorageError(f"{what}: SQLite error in {self.path}: {exc}") from exc

    def get(self, volume_id: str) -> VolumeRecord | None:
        with self._translate(f"read volume record {volume_id!r}"):
            row = (
                self._db.get()
                .execute(f"SELECT doc FROM {TABLE} WHERE volume_id = ?", (volume_id,))
                .fetchone()
            )
        return VolumeRecord.from_doc(json.loads(row[0])) if row else None

    def insert(self, record: VolumeRecord) -> VolumeRecord:
        with self._translate(f"record volume {record.volume_id!r}"):
            self._db.get().execute(
                f"INSERT OR IGNORE INTO {TABLE} (volume_id, doc) VALUES (?, ?)",
                (record.volume_id, json.dumps(record.to_doc(), sort_keys=True)),
            )
        stored = self.get(record.volume_id)
        assert stored is not None  # inserted now or before; records are deleted only by DeleteVolume
        return stored

    def delete(self, volume_id: str) -> bool:
        with self._translate(f"delete volume record {volume_id!r}"):
            cursor = self._db.get().execute(f"DELETE FROM {TABLE} WHERE volume_id = ?", (volume_id,))
        return cursor.rowcount > 0

    def list(self) -> list[VolumeRecord]:
        with self._translate("list volume records"):
            rows = self._db.get().execute(f"SELECT doc FROM {TABLE} ORDER BY volume_id").fetchall()
        return [VolumeRecord.from_doc(json.loads(r[0])) for r in rows]

    def close(self) -> None:
        self._db.close()


class MongoVolumeRecords:
    """``csi_volumes`` in the catalog's MongoDB database; ``_id`` is the volume id (unique)."""

    def __init__(self, url: str, *, client: Any = None) -> None:
        """``client`` lets tests share one mongomock server with a catalog store. The client is
        per process (``datahub.mongo_client.ProcessClient``): a forked child makes its own."""
        from datahub.mongo_client import ProcessClient, database_name

        self._mongo = ProcessClient(url, client)
        self._db_name = database_name(url)
        self._mongo.get()  # a URL pymongo refuses is refused here, as before

    @property
    def _coll(self) -> Any:
        """The records' collection on this process's client."""
        return self._mongo.get().get_database(self._db_name)[TABLE]

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        import pymongo.errors

        try:
            yield
        except pymongo.errors.PyMongoError as exc:
            raise StorageError(f"{what}: MongoDB error: {exc}") from exc

    def get(self, volume_id: str) -> VolumeRecord | None:
        with self._translate(f"read volume record {volume_id!r}"):
            doc = self._coll.find_one({"_id": volume_id})
        return VolumeRecord.from_doc(doc) if doc else None

    def insert(self, record: VolumeRecord) -> VolumeRecord:
        import pymongo.errors

        with self._translate(f"record volume {record.volume_id!r}"):
            try:
                self._coll.insert_one({"_id": record.volume_id, **record.to_doc()})
            except pymongo.errors.DuplicateKeyError:
                pass  # another CreateVolume (or an earlier one) recorded it: compare against that
        stored = self.get(record.volume_id)
        assert stored is not None
        return stored

    def delete(self, volume_id: str) -> bool:
        with self._translate(f"delete volume record {volume_id!r}"):
            return self._coll.delete_one({"_id": volume_id}).deleted_count > 0

    def list(self) -> list[VolumeRecord]:
        with self._translate("list volume records"):
            return [VolumeRecord.from_doc(d) for d in self._coll.find().sort("_id", 1)]

    def close(self) -> None:
        self._mongo.close()


def open_volume_records(catalog_url: str) -> VolumeRecords:
    """The volume records of the catalog at ``catalog_url`` (the URL forms of open_catalog)."""
    if catalog_url.startswith("sqlite:///"):
        path = catalog_url[len("sqlite:///") :]
        if not path:
            raise InvalidInput(f"catalog URL {catalog_url!r} names no file; use sqlite:///path/to/catalog.db")
        return SQLiteVolumeRecords(path)
    if urlsplit(catalog_url).scheme in ("mongodb", "mongodb+srv", "mongomock"):
        return MongoVolumeRecords(catalog_url)
    raise InvalidInput(
        f"unsupported catalog URL {catalog_url!r} for CSI volume records: use sqlite:///path.db or mongodb://host/db"
    )
