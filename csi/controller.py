"""The Controller service's behaviour: dynamic workspace volumes, capability checks.

Only workspaces are provisioned dynamically (a PVC of a StorageClass): a dataset or bucket
volume names data that already exists, so it is a static PV (or an inline volume) whose
attributes say what to show. Provisioning a workspace needs no storage call: a workspace
is created on first mount, so CreateVolume derives the workspace name from the CO's
volume name (idempotent by construction: the same name always gives the same volume).
DeleteVolume keeps the data: flushed files stay under ``<objects_url>/workspaces/<name>``
and may back a committed dataset version (promise 1); clean them with bucket rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from csi.volumes import Capability, check_capability, parse_context, workspace_name
from datahub.errors import InvalidInput
from datahub.validation import check_name

PARAMETERS = {"commitTo", "uid", "gid"}


@dataclass(frozen=True)
class CreatedVolume:
    volume_id: str
    context: dict[str, str]
    capacity_bytes: int = 0


class ControllerService:
    def create_volume(
        self,
        name: str,
        capabilities: Sequence[Capability],
        parameters: Mapping[str, str],
        *,
        required_bytes: int = 0,
        has_content_source: bool = False,
    ) -> CreatedVolume:
        ws = workspace_name(name)
        if not capabilities:
            raise InvalidInput(f"CreateVolume {name!r}: volume_capabilities is required")
        unknown = sorted(set(parameters) - PARAMETERS)
        if unknown:
            raise InvalidInput(
                f"CreateVolume {name!r}: unknown StorageClass parameter(s) {', '.join(unknown)}; only "
                f"workspace volumes are provisioned ({', '.join(sorted(PARAMETERS))}); dataset and bucket "
                "volumes are static PVs or inline volumes"
            )
        if has_content_source:
            raise InvalidInput(
                f"CreateVolume {name!r}: volume content sources (clones, snapshots) are not supported"
            )
        context = {"workspace": ws}
        if parameters.get("commitTo"):
            context["commitTo"] = check_name(parameters["commitTo"], "commitTo dataset")
        for key in ("uid", "gid"):
            if parameters.get(key):
                context[key] = parameters[key]
        spec = parse_context(context, ws)
        for cap in capabilities:
            check_capability(spec, cap, ws)
        return CreatedVolume(ws, context, max(0, required_bytes))

    def delete_volume(self, volume_id: str) -> None:
        if not volume_id:
            raise InvalidInput("DeleteVolume: volume_id is required")
        # nothing to release: the workspace's data is kept (see the module docstring)

    def validate(
        self, volume_id: str, context: Mapping[str, str], capabilities: Sequence[Capability]
    ) -> str | None:
        """None if every capability is supported for this volume, else the reason why not."""
        if not volume_id:
            raise InvalidInput("ValidateVolumeCapabilities: volume_id is required")
        if not capabilities:
            raise InvalidInput(f"ValidateVolumeCapabilities {volume_id!r}: volume_capabilities is required")
        spec = parse_context(context, volume_id) if context else None
        try:
            for cap in capabilities:
                check_capability(spec, cap, volume_id)
        except InvalidInput as exc:
            return exc.message
        return None
