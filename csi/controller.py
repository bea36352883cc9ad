"""The Controller service's behaviour: dynamic workspace volumes, recorded in the catalog.

Only workspaces are provisioned dynamically (a PVC of a StorageClass): a dataset or bucket
volume names data that already exists, so it is a static PV (or an inline volume) whose
attributes say what to show. Provisioning a workspace needs no storage call (a workspace is
created on first mount), but CSI needs the controller to remember what it made: the same
CreateVolume again returns the same volume, a different one under a used name is
ALREADY_EXISTS, and ValidateVolumeCapabilities / ControllerGetVolume answer NOT_FOUND for
ids it never made. So every volume has a record in the catalog (csi/volume_records.py):
name, parameters, capacity, created time and the workspace it owns. Everything about a
request is checked before the record is written, in one statement: a CreateVolume that
fails leaves no record and no workspace.

DeleteVolume forgets the record and keeps the data: flushed files stay under
``<objects_url>/workspaces/<name>/j-<journal id>/``, the last state of a workspace that was
never committed; committed dataset versions (``commitTo``) name content-addressed blobs
under ``<objects_url>/blobs/sha256/``, which nothing here deletes (promise 1: a committed
version is never dropped). Deleting a PVC therefore never removes a committed version, nor
the last flushed state of an uncommitted workspace; clean those prefixes with bucket rules
once nothing needs them.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from csi.volume_records import VolumeRecord, VolumeRecords
from csi.volumes import (
    KUBERNETES_PREFIX,
    Capability,
    VolumeSpec,
    check_capability,
    parse_context,
    workspace_name,
)
from datahub.errors import AlreadyExists, DatasetNotFound, InvalidInput, NotFound
from datahub.validation import check_name

if TYPE_CHECKING:
    from datahub.catalog import Catalog

log = logging.getLogger(__name__)

PARAMETERS = {"commitTo", "uid", "gid"}
MAX_NAME_BYTES = 128  # the spec's size limit for strings
MAX_CAPACITY = 1 << 50  # 1 PiB: far beyond any shared tier; catches unit mistakes (bytes for KiB)
# the spec bans control characters other than common whitespace in names
_BANNED = re.compile("[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]")


class CapacityOutOfRange(InvalidInput):
    """A capacity the plugin cannot provision (gRPC OUT_OF_RANGE)."""

    code = "capacity_out_of_range"


class VolumeNotFound(NotFound):
    code = "volume_not_found"


@dataclass(frozen=True)
class CreatedVolume:
    volume_id: str
    context: dict[str, str]
    capacity_bytes: int = 0


def volume_context(record: VolumeRecord) -> dict[str, str]:
    """The volume attributes the node plugin gets for a provisioned workspace."""
    context = {"workspace": record.workspace}
    for key in ("commitTo", "uid", "gid"):
        if record.parameters.get(key):
            context[key] = record.parameters[key]
    if record.capacity_bytes:
        context["quotaBytes"] = str(record.capacity_bytes)  # the node mounts it with this quota
    return context


def check_request_name(name: str) -> str:
    if not name:
        raise InvalidInput("CreateVolume: name is required")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise InvalidInput(f"CreateVolume: name is longer than {MAX_NAME_BYTES} bytes", name=name[:40])
    if _BANNED.search(name):
        raise InvalidInput(f"CreateVolume {name!r}: name contains a control character")
    return name


def capacity_of(name: str, required: int, limit: int) -> int:
    """The quota to give a new volume for ``capacity_range``: required, else limit, else none (0)."""
    for field, value in (("required_bytes", required), ("limit_bytes", limit)):
        if value < 0:
            raise InvalidInput(
                f"CreateVolume {name!r}: capacity_range.{field} must not be negative ({value})"
            )
        if value > MAX_CAPACITY:
            raise CapacityOutOfRange(
                f"CreateVolume {name!r}: capacity_range.{field} {value} is above the largest workspace "
                f"quota, {MAX_CAPACITY} bytes (1 PiB)"
            )
    if limit and required > limit:
        raise InvalidInput(
            f"CreateVolume {name!r}: capacity_range.required_bytes ({required}) is above "
            f"capacity_range.limit_bytes ({limit})"
        )
    return required or limit


def _fits(capacity: int, required: int, limit: int) -> bool:
    return (not required or capacity >= required) and (not limit or capacity <= limit)


def _significant(parameters: Mapping[str, str]) -> dict[str, str]:
    """Parameters that make a volume what it is (the provisioner's csi.storage.k8s.io/* metadata
    names the PVC and is not a property of the volume)."""
    return {k: v for k, v in parameters.items() if not k.startswith(KUBERNETES_PREFIX)}


class ControllerService:
    def __init__(self, records: VolumeRecords, *, catalog: Callable[[], Catalog] | None = None) -> None:
        """``catalog()`` opens the catalog (to tell whether a static dataset volume exists)."""
        self.records = records
        self._open_catalog = catalog

    # --- CreateVolume -------------------------------------------------------------------------
    def create_volume(
        self,
        name: str,
        capabilities: Sequence[Capability],
        parameters: Mapping[str, str],
        *,
        required_bytes: int = 0,
        limit_bytes: int = 0,
        has_content_source: bool = False,
    ) -> CreatedVolume:
        check_request_name(name)
        ws = workspace_name(name)
        if not capabilities:
            raise InvalidInput(f"CreateVolume {name!r}: volume_capabilities is required")
        significant = _significant(parameters)
        unknown = sorted(set(significant) - PARAMETERS)
        if unknown:
            raise InvalidInput(
                f"CreateVolume {name!r}: unknown StorageClass parameter(s) {', '.join(unknown)}; only "
                f"workspace volumes are provisioned ({', '.join(sorted(PARAMETERS))}); dataset and bucket "
                "volumes are static PVs or inline volumes"
            )
        if has_content_source:
            raise InvalidInput(
                f"CreateVolume {name!r}: volume_content_source (clones, snapshots) is not supported"
            )
        capacity = capacity_of(name, required_bytes, limit_bytes)
        if significant.get("commitTo"):
            check_name(significant["commitTo"], "commitTo parameter (a dataset)")
        wanted = VolumeRecord(
            volume_id=ws,
            name=name,
            workspace=ws,
            parameters=significant,
            capacity_bytes=capacity,
            created_at=time.time(),
        )
        spec = parse_context(volume_context(wanted), ws)  # uid/gid: InvalidInput naming the attribute
        for cap in capabilities:
            check_capability(spec, cap, ws)
        stored = self.records.insert(wanted)  # the existing record if the name was used before
        if stored.name != name:
            raise AlreadyExists(
                f"CreateVolume {name!r}: its volume id {ws!r} belongs to volume {stored.name!r}",
                volume_id=ws,
            )
        if stored.parameters != significant:
            raise AlreadyExists(
                f"CreateVolume {name!r}: the volume exists with other parameters "
                f"({_describe(stored.parameters)}, asked {_describe(significant)}); delete it first",
                volume_id=ws,
            )
        if not _fits(stored.capacity_bytes, required_bytes, limit_bytes):
            raise AlreadyExists(
                f"CreateVolume {name!r}: the volume exists with capacity {stored.capacity_bytes} bytes, "
                f"outside the asked capacity_range (required {required_bytes}, limit {limit_bytes or 'none'})",
                volume_id=ws,
            )
        if stored.created_at == wanted.created_at:
            log.info("created volume %s (workspace %s, capacity %d)", ws, ws, capacity)
        return CreatedVolume(stored.volume_id, volume_context(stored), stored.capacity_bytes)

    # --- DeleteVolume -------------------------------------------------------------------------
    def delete_volume(self, volume_id: str) -> None:
        if not volume_id:
            raise InvalidInput("DeleteVolume: volume_id is required")
        record = self.records.get(volume_id)
        if record is None:
            return  # never made, or already deleted: success (idempotent)
        self.records.delete(volume_id)
        log.info(
            "deleted volume %s (%s); workspace %s's flushed files and every version committed from it are "
            "kept (see docs/csi.md 'Deleting a volume')",
            volume_id,
            record.name,
            record.workspace,
        )

    # --- ValidateVolumeCapabilities -----------------------------------------------------------
    def validate(
        self, volume_id: str, context: Mapping[str, str], capabilities: Sequence[Capability]
    ) -> str | None:
        """None if every capability is supported for this volume, else the reason why not.

        VolumeNotFound unless the volume exists: a record for a provisioned workspace, or a
        static dataset volume whose dataset is in the catalog, or a static bucket volume
        (only the node holds bucket credentials; it checks at publish time).
        """
        if not volume_id:
            raise InvalidInput("ValidateVolumeCapabilities: volume_id is required")
        if not capabilities:
            raise InvalidInput(f"ValidateVolumeCapabilities {volume_id!r}: volume_capabilities is required")
        record = self.records.get(volume_id)
        if record is not None:
            recorded = volume_context(record)
            given = _significant(context)
            if given and given != recorded:
                return f"volume_context does not match volume {volume_id!r}'s ({_describe(recorded)})"
            spec = parse_context(recorded, volume_id)
        else:
            spec = self._static(volume_id, context)
        try:
            for cap in capabilities:
                check_capability(spec, cap, volume_id)
        except InvalidInput as exc:
            return exc.message
        return None

    def _static(self, volume_id: str, context: Mapping[str, str]) -> VolumeSpec:
        missing = VolumeNotFound(
            f"volume {volume_id!r} was not created by CreateVolume, and its volume_context names no "
            "dataset or bucket of a static volume",
            volume_id=volume_id,
        )
        if not _significant(context):
            raise missing
        spec = parse_context(context, volume_id)
        if spec.kind == "workspace":
            raise missing  # workspace volumes are provisioned; a record says they exist
        if spec.kind == "dataset" and self._open_catalog is not None:
            catalog = self._open_catalog()
            try:
                catalog.get_dataset(spec.dataset)
            except DatasetNotFound as exc:
                raise VolumeNotFound(
                    f"volume {volume_id!r}: dataset {spec.dataset!r} does not exist", volume_id=volume_id
                ) from exc
            finally:
                catalog.close()
        return spec

    # --- ControllerGetVolume ------------------------------------------------------------------
    def get_volume(self, volume_id: str) -> CreatedVolume:
        if not volume_id:
            raise InvalidInput("ControllerGetVolume: volume_id is required")
        record = self.records.get(volume_id)
        if record is None:
            raise VolumeNotFound(
                f"volume {volume_id!r} does not exist (never created, or deleted)", volume_id=volume_id
            )
        return CreatedVolume(record.volume_id, volume_context(record), record.capacity_bytes)


def _describe(parameters: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(parameters.items())) or "no parameters"
