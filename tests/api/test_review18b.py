"""review18b: attacks on the paged writer lease list (leasepage17, review17d).

The list hides a lease from a caller who may not take it (promise 5: bound to a dataset it may
not read, or to no target), and ``GET /v1/remote/leases/{name}`` answers such a name as one
nobody leased, so a stranger learns neither who holds a workspace nor that it exists.
"""

from __future__ import annotations

import uuid

from tests.api.conftest import Api


def _take(api: Api, name: str, dataset: str, holder: str = "host n pid 7 [root]") -> None:
    api.catalog.store.acquire_lease(name, uuid.uuid4().hex, holder, 600, dataset)


def _page(api: Api, who: str, **params: object) -> tuple[list[str], str | None]:
    r = api.get("/v1/remote/leases", who, params=params)
    assert r.status_code == 200, r.text
    return [row["name"] for row in r.json()["leases"]], r.json()["next"]


def test_next_names_no_lease_the_caller_may_not_see(api: Api) -> None:
    """eve has no role on pets: every lease bound to it is hidden from her, and GET answers each
    one 404 as a name nobody leased. The route read a window of rows and answered the last
    one's name as ``next``: walking ``after`` she collected every fourth hidden name (and a
    bisection on ``after`` the others). Fixed (leasefilter18): the store filters, ``next`` is
    a lease she sees or null."""
    hidden = [f"secret-merger-{c}" for c in "abcdefgh"]
    for name in hidden:
        _take(api, name, "pets")
    assert _page(api, "eve") == ([], None)  # a full page: she sees none
    for name in hidden:
        assert api.get(f"/v1/remote/leases/{name}", "eve").status_code == 404  # "nobody leased it"
    learned, after = set(), ""
    while True:
        rows, after = _page(api, "eve", limit=1, after=after)
        assert rows == []
        if after is None:
            break
        learned.add(after)
    assert learned & set(hidden) == set(), f"eve learned {sorted(learned & set(hidden))}"


def test_a_walk_by_next_neither_skips_nor_repeats_whatever_the_caller_sees(api: Api) -> None:
    """Held: leases bound to pets (bob writes it, alice only reads it), to a dataset bob may
    not read, to none, and to datasets not created yet (bob's own and eve's), interleaved by
    name. Walking ``next`` at every page size, bob gets exactly his, once each, in order; alice
    (a reader, not a writer) and eve get only their own."""
    api.catalog.create_dataset("vault", owner="owner")
    bound = {"pets": "pets", "vault": "vault", "none": ""}
    expected: dict[str, list[str]] = {"bob": [], "alice": [], "eve": []}
    for i in range(12):
        kind = ("pets", "vault", "none", "bob", "eve", "pets")[i % 6]
        name = f"ws-{i:02d}-{kind}"
        if kind in bound:
            _take(api, name, bound[kind])
        else:
            _take(api, name, f"{kind}-results-{i}", f"host {kind} pid 7 [{kind}]")
        if kind in ("pets", "bob"):
            expected["bob"].append(name)
        if kind == "eve":
            expected["eve"].append(name)
    for who, want in expected.items():
        for limit in (1, 2, 3, 5, 1000):
            got, after = [], ""
            while after is not None:
                rows, after = _page(api, who, limit=limit, after=after)
                assert len(rows) <= limit
                got += rows
            assert got == want, (who, limit)
