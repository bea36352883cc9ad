"""PUT/DELETE /v1/datasets/{name}/tags/{tag}: name a version (a tag is unique within its dataset)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from datahub.api.deps import LineageDep, ServicesDep, WritableDataset
from datahub.api.schemas import TAG_SHAPE, TagSet, VersionPublic, shape, version_public
from datahub.validation import TAG_RE

TagPath = Annotated[
    str, Path(description="tag name (never a version reference)", json_schema_extra=TAG_SHAPE)
]
# deleting also accepts a version-like name stored before such tags were refused
ExistingTagPath = Annotated[
    str, Path(description="tag name", json_schema_extra=shape("^" + TAG_RE.pattern + "$", 63))
]
router = APIRouter(prefix="/v1/datasets/{name}/tags", tags=["tags"])


@router.put("/{tag}")
def set_tag(
    tag: TagPath, body: TagSet, dataset: WritableDataset, services: ServicesDep, view: LineageDep
) -> VersionPublic:
    """Point ``tag`` at ``ref`` (moving it if it exists); returns the tagged version."""
    # the version this request tagged, not the tag resolved again: another writer moving it in
    # between made the answer that writer's version (catalog43)
    return version_public(view.version(services.catalog.tag(dataset.name, tag, body.ref)))


@router.delete("/{tag}", status_code=status.HTTP_204_NO_CONTENT)
def delete_tag(tag: ExistingTagPath, dataset: WritableDataset, services: ServicesDep) -> Response:
    services.catalog.untag(dataset.name, tag)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
