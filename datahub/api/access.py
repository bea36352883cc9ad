"""Who may do what: per-dataset roles reader < writer < admin, and global admins.

A dataset's ``acl`` maps principals (or ``*`` for every authenticated caller) to a role;
the dataset's owner is an admin of it; a global admin token is admin everywhere. In
local mode (no authentication, loopback only) the caller is the global admin ``local``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from datahub.catalog.model import ROLES, Dataset
from datahub.catalog.snapshots import snapshot_name
from datahub.errors import AccessDenied, AlreadyExists, DatasetNotFound, InvalidInput

RANK = {role: i for i, role in enumerate(ROLES)}  # reader 0 < writer 1 < admin 2


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    is_admin: bool = False


LOCAL = Principal("local", is_admin=True)


def check_role(role: str) -> str:
    if role not in RANK:
        raise InvalidInput(f"invalid role {role!r}: use one of {', '.join(ROLES)}", role=role)
    return role


def role_rank(principal: Principal, dataset: Dataset) -> int:
    """Highest role rank of ``principal`` on ``dataset``; -1 for none."""
    if principal.is_admin or (dataset.owner and dataset.owner == principal.name):
        return RANK["admin"]
    ranks = [RANK.get(dataset.acl.get(name, ""), -1) for name in (principal.name, "*")]
    return max(ranks)


def can(principal: Principal, dataset: Dataset, role: str) -> bool:
    return role_rank(principal, dataset) >= RANK[role]


def hidden(name: str) -> DatasetNotFound:
    """The very error a missing dataset gives (same code, message and details), so a caller
    who may not read a dataset cannot tell it from one that does not exist."""
    return DatasetNotFound(
        f"dataset {name!r} not found; create it first or check `datahub dataset list`",
        dataset=name,
    )


def hidden_target(name: str, principal: Principal) -> DatasetNotFound:
    """404 for a write target the caller named (a derive's ``to_dataset``) and may not read.

    Still ``dataset_not_found`` with no more details than a missing dataset's, so the answer
    says nothing of the dataset (its owner, access list, versions). But the plain "create it
    first" sent the caller to create a target a derive creates itself when it is missing:
    the message says what the 404 means here and both ways on."""
    return DatasetNotFound(
        f"to_dataset {name!r} is missing or not visible to {principal.name!r} (a dataset the caller holds "
        "no role on answers as a missing one): derive into a new name, which it creates, or ask the "
        f"dataset's admins for the writer role (datahub dataset update {name} --grant {principal.name}=writer)",
        dataset=name,
    )


@contextmanager
def creating(principal: Principal, name: str, lookup: Callable[[str], Dataset]) -> Iterator[None]:
    """Around a create of dataset ``name`` by ``principal``: a name taken by a dataset the caller
    may not read is refused with a message saying so and what to do.

    Why: every other route hides such a dataset (``hidden``), so clients that create their
    target when it is "missing" (``datahub import --to``, a workspace's ``--commit-to``, a CSI
    ``commitTo``) came here and got "already exists; pick another name", though the caller
    meant to write into it and needs a role on it. The 409 itself tells that the name is
    taken (names are global), so saying the caller holds no role there reveals nothing more.
    """
    try:
        yield
    except AlreadyExists as exc:
        try:
            readable = can(principal, lookup(name), "reader")
        except DatasetNotFound:
            readable = True  # deleted meanwhile: the plain answer
        if readable:
            raise
        raise AlreadyExists(
            f"dataset {name!r} already exists (dataset names are global) and {principal.name!r} holds no role "
            f"on it, so it is hidden from this token: pick another name, or ask one of its admins to grant "
            f"the role you need (datahub dataset update {name} --grant {principal.name}=writer)",
            dataset=name,
        ) from exc


def require(principal: Principal, dataset: Dataset, role: str) -> None:
    """404 (as if missing) unless the caller may read ``dataset``, as GitHub does for private
    repositories, so names cannot be enumerated; AccessDenied naming the dataset and the role
    needed when the caller may read it but needs more."""
    if not can(principal, dataset, "reader"):
        raise hidden(dataset.name)
    if not can(principal, dataset, role):
        raise AccessDenied(
            f"{principal.name!r} needs the {role} role on dataset {dataset.name!r}; "
            "ask one of its admins to grant it",
            dataset=dataset.name,
            required_role=role,
        )


def require_creatable(principal: Principal, name: str) -> None:
    """AccessDenied unless ``principal`` may create a dataset named ``name`` over HTTP.

    Why: a bucket mount commits the listing it made with its own credentials (keys, etags,
    sizes) into dataset ``s3.<bucket>.<prefix>``, the one that already has that name
    included. Created first by a token, that dataset was the token's: its owner read another
    tenant's bucket listing and then the objects, through the platform's credentials (a CSI
    dataset volume, the browser's thumbnails). So those names are global admins' to create."""
    if principal.is_admin or not snapshot_name(name):
        return
    raise AccessDenied(
        f"dataset name {name!r} is reserved for the snapshots bucket mounts record "
        f"({name.partition('.')[0]}.<bucket>.<prefix>); only a global admin may create it: "
        "pick a name that does not start with a storage scheme and a dot",
        dataset=name,
    )
