"""lease17: the stores renew a writer lease only while it names the commit target the renewal
was authorised for, in the same atomic turn as the write (``leases.renewed``'s ``bound``).

Why: the API checks a renewer's role on the lease's target, then renews; a take with the same
owner id in between could bind the lease to another dataset (tests/api/test_lease17.py forces
that race through the route). SQLite decides in its ``BEGIN IMMEDIATE`` transaction; MongoDB
in a compare-and-swap whose filter names the target it read, so a take between its read and
its write makes it read again and refuse."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import CatalogStore, open_catalog
from datahub.catalog.leases import state
from datahub.errors import Conflict
from tests.catalog.conftest import make_store
from tests.fuse.conftest import FuseEnv, make_env
from tests.servers import S3Endpoint


@pytest.fixture(params=["sqlite", "mongomock"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CatalogStore]:
    made = make_store(request.param, tmp_path)
    try:
        yield made
    finally:
        made.close()


def test_a_renewal_bound_to_a_target_the_lease_no_longer_names_is_refused(store: CatalogStore) -> None:
    taken = store.acquire_lease("ws", "owner-a", "node a", 60, "pets")
    assert store.renew_lease("ws", "owner-a", 1, 60, bound="pets").dataset == "pets"
    rebound = store.acquire_lease("ws", "owner-a", "node z", 60, "other")  # the same owner id
    assert (rebound.epoch, rebound.dataset) == (taken.epoch, "other")
    with pytest.raises(Conflict, match="commit target of workspace 'ws' changed") as e:
        store.renew_lease("ws", "owner-a", 1, 3600, bound="pets")
    assert "other" not in e.value.message  # the new target is not named to who was checked on pets
    assert store.lease("ws") == rebound  # not renewed
    assert store.renew_lease("ws", "owner-a", 1, 60).dataset == "other"  # nothing checked: as before


def test_mongo_a_take_between_the_renewals_read_and_its_write_makes_it_refuse(tmp_path: Path) -> None:
    """The compare-and-swap: a take with the same owner id lands right after the renewal read
    the document (a hook on the collection's read, not a sleep). The swap matches nothing,
    the renewal reads again, sees the other target and refuses."""
    store = make_store("mongomock", tmp_path)
    try:
        store.acquire_lease("ws", "owner-a", "node a", 60, "pets")
        real = store.leases.find_one
        reads: list[object] = []

        def read_then_take(*args: object, **kwargs: object) -> object:
            doc = real(*args, **kwargs)
            reads.append(doc)
            if len(reads) == 1:
                store.acquire_lease("ws", "owner-a", "node z", 60, "other")
            return doc

        store.leases.find_one = read_then_take
        with pytest.raises(Conflict, match="changed while its writer lease was being renewed"):
            store.renew_lease("ws", "owner-a", 1, 3600, bound="pets")
        assert len(reads) == 3  # the renewal's first read, the take's, the renewal's second
        assert store.lease("ws").holder == "node z"
    finally:
        store.close()


# --- a plain mount's recovery commits as the mount's --author --------------------------------------
@pytest.fixture
def env(tmp_path: Path, moto_endpoint: S3Endpoint) -> FuseEnv:
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    return make_env(tmp_path / "fuse", moto_endpoint)


@pytest.mark.fuse
def test_a_killed_mounts_recovery_commits_as_the_mounts_author(env: FuseEnv) -> None:
    """``datahub mount --workspace W --commit-to D --author NAME``, kill -9, ``datahub umount``:
    the umount replays the dead daemon's journal and commits, and the version's author is
    NAME, as the daemon's own unmount records it. Before, it was whoever ran the umount."""
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        catalog.create_dataset("out17")
    finally:
        catalog.close()
    mnt = env.mountpoint("author17")
    with env.mounted(mnt, "--workspace", "ws17", "--commit-to", "out17", "--author", "ada-lovelace") as proc:
        (mnt / "a.txt").write_bytes(b"alpha")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        said = env.cli("umount", str(mnt)).stdout
    assert "out17@v1" in said, said
    catalog = open_catalog(env.config.resolved_catalog_url)
    try:
        assert [(v.seq, v.author) for v in catalog.log("out17")] == [(1, "ada-lovelace")]
    finally:
        catalog.close()


# --- list_leases: what `datahub lease list` shows ----------------------------------------------------
def test_every_lease_is_listed_by_name_as_stored_whatever_its_state(store: CatalogStore) -> None:
    assert store.list_leases() == []
    store.acquire_lease("b-ws", "owner-b", "node b", 60, "pets")
    store.acquire_lease("a-ws", "owner-a", "node a", 60)
    store.release_lease("a-ws", "owner-a", 1)
    store.acquire_lease("c-ws", "owner-c", "node c", 60, "other")
    store.break_lease("c-ws")
    listed = store.list_leases()
    assert listed == [store.lease(name) for name in ("a-ws", "b-ws", "c-ws")]
    now = time.time()
    assert [(lease.dataset, state(lease, now)) for lease in listed] == [
        ("", "free"),
        ("pets", "held"),
        ("other", "broken"),
    ]
