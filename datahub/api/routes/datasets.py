"""/v1/datasets: create, list (only what the caller may read), describe, update."""

from __future__ import annotations

from fastapi import APIRouter, status

from datahub.api.access import can
from datahub.api.deps import AdminDataset, PrincipalDep, ReadableDataset, ServicesDep
from datahub.api.schemas import DatasetCreate, DatasetPublic, DatasetUpdate, dataset_public
from datahub.api.tokens import check_principal

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])


def _check_acl(acl: dict[str, str]) -> dict[str, str]:
    for principal in acl:
        if principal != "*":
            check_principal(principal)
    return acl


@router.get("")
def list_datasets(services: ServicesDep, principal: PrincipalDep) -> list[DatasetPublic]:
    catalog = services.catalog
    return [
        dataset_public(d, catalog.store.head(d.name))
        for d in catalog.list_datasets()
        if can(principal, d, "reader")
    ]


@router.post("", status_code=status.HTTP_201_CREATED)
def create_dataset(body: DatasetCreate, services: ServicesDep, principal: PrincipalDep) -> DatasetPublic:
    """Any authenticated caller may create a dataset; the creator becomes its owner (admin)."""
    dataset = services.catalog.create_dataset(
        body.name,
        description=body.description,
        source=body.source,
        owner=principal.name,
        acl=_check_acl(body.acl),
    )
    return dataset_public(dataset, 0)


@router.get("/{name}")
def get_dataset(dataset: ReadableDataset, services: ServicesDep) -> DatasetPublic:
    return dataset_public(dataset, services.catalog.store.head(dataset.name))


@router.patch("/{name}")
def update_dataset(body: DatasetUpdate, dataset: AdminDataset, services: ServicesDep) -> DatasetPublic:
    fields = body.model_dump(exclude_none=True)
    if "acl" in fields:
        _check_acl(fields["acl"])
    if "owner" in fields and fields["owner"]:
        check_principal(fields["owner"])
    updated = services.catalog.update_dataset(dataset.name, **fields)
    return dataset_public(updated, services.catalog.store.head(dataset.name))
