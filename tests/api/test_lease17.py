"""lease17: a renewal over the API renews only the lease its role check was made for.

The renew route reads the lease, checks the caller's writer role on the commit target it
names, then asks the store to renew. A take with the same owner id in between (the id is a
bearer secret: a leaked one, or the holder's own other process) could bind the lease to
another dataset, and the renewal, authorised for the first, extended a lease now bound to
one the caller may not write. And a renewal refused at the read (released: no role is
checked) renewed anyway when a take with the id revived the lease before the store's turn.
The store now renews only if the lease still names the target that was checked, in the same
atomic turn as the write; the route refuses what it did not check. Each interleaving is
forced by a hook on the server's own catalog, at the exact step, never by a sleep."""

from __future__ import annotations

import json
import shlex
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from datahub.api.tokens import issue_token
from datahub.catalog import Catalog
from datahub.catalog.http_store import HttpCatalogStore
from datahub.errors import Conflict
from tests.api.conftest import Api
from tests.catalog.remote import serve

LEASE = "/v1/remote/leases/training"


def once_after(target: Any, method: str, then: Callable[[], None], monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``target.method``'s first call run ``then()`` right after it returns."""
    real = getattr(target, method)
    done: list[bool] = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if not done:
            done.append(True)
            then()
        return result

    monkeypatch.setattr(target, method, hooked)


def rebind(catalog: Catalog, owner: str, dataset: str) -> Callable[[], None]:
    """A take with ``owner`` naming ``dataset``: a node whose token may write it and ``pets``."""
    return lambda: catalog.store.acquire_lease("training", owner, "node z [zed]", 60, dataset)


def test_a_renewal_checked_on_one_target_does_not_renew_a_lease_rebound_meanwhile(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bob (writer on ``pets``, nothing on ``other``) renews ``training``, bound to pets. Right
    after the route checked his role on pets, a take with the same owner id binds it to other.
    Before: 200, bob's renewal extended a lease bound to a dataset he may not write. Now 409,
    not naming other, and the lease keeps the expiry the take gave it."""
    api.catalog.create_dataset("other", owner="owner")
    owner = uuid.uuid4().hex
    body = {"owner": owner, "holder": "node b", "ttl": 60, "dataset": "pets"}
    taken = api.post(LEASE, "bob", json=body)
    assert taken.status_code == 200, taken.text
    once_after(api.catalog, "get_dataset", rebind(api.catalog, owner, "other"), monkeypatch)
    r = api.post(f"{LEASE}/renew", "bob", json={"owner": owner, "epoch": 1, "ttl": 3600})
    assert r.status_code == 409 and '"conflict"' in r.text, r.text
    assert "other" not in r.text  # a dataset bob may not read is never named to him
    now = api.catalog.store.lease("training")
    assert now.dataset == "other" and now.expires < taken.json()["expires"] + 600  # not renewed


def test_a_renewal_refused_at_its_read_is_not_made_by_a_take_that_revives_the_lease(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bob's node released ``training``; eve, with no role on pets, renews it with his leaked
    owner id: refused at the route's read (no role is checked for a lease the id does not
    hold). Right after that read, bob's node takes it back with the same id. Before: the
    store's renewal passed and eve kept bob's workspace held for an hour. Now 409, not
    naming the holder to her, and the lease keeps bob's own expiry."""
    owner = uuid.uuid4().hex
    body = {"owner": owner, "holder": "node b", "ttl": 60, "dataset": "pets"}
    assert api.post(LEASE, "bob", json=body).status_code == 200
    assert api.post(f"{LEASE}/release", "bob", json={"owner": owner, "epoch": 1}).status_code == 204
    once_after(api.catalog.store, "lease", rebind(api.catalog, owner, "pets"), monkeypatch)
    r = api.post(f"{LEASE}/renew", "eve", json={"owner": owner, "epoch": 1, "ttl": 3600})
    assert r.status_code == 409 and "no longer ours" in r.text and "node" not in r.text, r.text
    now = api.catalog.store.lease("training")
    assert now.holder == "node z [zed]" and now.expires < time.time() + 600  # the take's 60 s, not 3600


def test_over_a_real_server_a_renewal_renews_only_the_target_it_was_checked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same race through ``datahub serve`` and the HTTP store: bob's node renews, the
    server checks pets, a take with the owner id binds other, and the renewal is Conflict (the
    node fences) instead of extending it. The HTTP store passes a target of its own through:
    a renewal naming a target the lease does not name is Conflict too, and one naming the
    lease's own is renewed."""
    server, backing, _ = serve(tmp_path)
    store = None
    try:
        backing.create_dataset("pets", owner="root", acl={"bob": "writer"})
        backing.create_dataset("other", owner="root")
        store = HttpCatalogStore(server.url, issue_token(backing.store, "bob")[0])
        owner = uuid.uuid4().hex
        taken = store.acquire_lease("training", owner, "node b", 60, "pets")
        assert store.renew_lease("training", owner, 1, 60, bound="pets").dataset == "pets"
        with pytest.raises(Conflict, match="commit target of workspace 'training' changed"):
            store.renew_lease("training", owner, 1, 60, bound="")
        once_after(backing, "get_dataset", rebind(backing, owner, "other"), monkeypatch)
        with pytest.raises(Conflict) as e:
            store.renew_lease("training", owner, 1, 3600)
        assert "other" not in e.value.message
        now = backing.store.lease("training")
        assert now.dataset == "other" and now.expires < taken.expires + 600
    finally:
        if store is not None:
            store.close()
        server.stop()
        backing.close()


# --- GET /v1/remote/leases and `datahub lease list` ---------------------------------------------------
def test_the_list_shows_each_caller_the_leases_it_may_see_by_name(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A global admin sees every lease; anyone else those ``GET /{name}`` shows them, the
    leases of commit targets they may write: bob (writer of pets) pets', eve her own
    dataset's, alice (a reader of pets) none. Never an owner id; ``expires_in`` on the
    server's clock, ``state`` saying lapsed or not."""
    assert api.post("/v1/datasets", "eve", json={"name": "eve-out"}).status_code == 201
    owners = {}
    for name, who, dataset in (
        ("train-b", "bob", "pets"),
        ("train-a", "bob", "pets"),
        ("eves", "eve", "eve-out"),
        ("admins", "admin", ""),
    ):
        owners[name] = uuid.uuid4().hex
        body = {"owner": owners[name], "holder": f"host {who} pid 7", "ttl": 600, "dataset": dataset}
        # train-a taken on a store clock an hour back: lapsed 3000 s ago (no sleep, no race)
        back = 3600 if name == "train-a" else 0
        monkeypatch.setattr(api.catalog.store, "clock", lambda back=back: time.time() - back)
        assert api.post(f"/v1/remote/leases/{name}", who, json=body).status_code == 200
    monkeypatch.undo()
    seen = {}
    for who in ("admin", "bob", "eve", "alice"):
        r = api.get("/v1/remote/leases", who)
        assert r.status_code == 200, r.text
        assert not any(owner in r.text for owner in owners.values())
        seen[who] = [row["name"] for row in r.json()["leases"]]
    assert seen == {
        "admin": ["admins", "eves", "train-a", "train-b"],
        "bob": ["train-a", "train-b"],
        "eve": ["eves"],
        "alice": [],
    }
    rows = {row["name"]: row for row in api.get("/v1/remote/leases", "admin").json()["leases"]}
    assert rows["train-b"]["holder"] == "host bob pid 7 [bob]" and rows["train-b"]["state"] == "held"
    assert 0 < rows["train-b"]["expires_in"] <= 600
    assert rows["train-a"]["state"] == "lapsed" and -3100 < rows["train-a"]["expires_in"] < -2900
    assert rows["admins"]["dataset"] == "" and rows["admins"]["holder"].endswith("[root]")


def test_the_docs_lease_list_runs_as_written_over_a_real_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """docs/cli.md's ``lease list`` line, its URL swapped for this server's: the admin's table
    names every lease with its holder, target and state; with ``--json`` bob's token lists
    only the lease of pets, which he writes."""
    from datahub.cli.main import main
    from tests.cli.test_lease_cli16 import DOC_URL, docs_block

    server, backing, admin = serve(tmp_path)
    try:
        bob = issue_token(backing.store, "bob")[0]
        backing.create_dataset("pets", owner="root", acl={"bob": "writer"})
        backing.store.acquire_lease("training", uuid.uuid4().hex, "host n pid 9 [bob]", 600, "pets")
        backing.store.acquire_lease("scratch", uuid.uuid4().hex, "host m pid 8 [root]", 600)
        monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("DATAHUB_HOME", str(tmp_path / "client"))
        monkeypatch.setenv("DATAHUB_API_TOKEN", admin)
        (line,) = [line for line in docs_block() if " lease list" in line]
        argv = shlex.split(line.replace(DOC_URL, server.url))
        assert argv[0] == "datahub" and main(argv[1:]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0].split() == ["NAME", "DATASET", "HOLDER", "EPOCH", "EXPIRES_IN", "STATE"]
        assert "training" in out and "scratch" in out and "host n pid 9 [bob]" in out and "held" in out
        monkeypatch.setenv("DATAHUB_API_TOKEN", bob)
        assert main([*argv[1:-2], "--json", "lease", "list"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert [(r["name"], r["dataset"], r["state"]) for r in rows] == [("training", "pets", "held")]
    finally:
        server.stop()
        backing.close()
