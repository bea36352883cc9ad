"""Which object URLs a commit over HTTP may record (docs/api.md, "Record URLs").

The defect: any writer, of a dataset it created itself included, could commit a record
pointing at any object the platform's own credentials may read, then read it through the
platform (here the browser's thumbnails, which the API server reads with its own stores): a
confused deputy. Now, over HTTP, a non-admin put must name a URL under the dataset's
``sources`` (set by global admins only) or the server's ``api.commit_sources``, a blob the
platform names by content, or a record the caller may already read at that key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from datahub.api.tokens import issue_token
from datahub.catalog.model import Put, Record
from datahub.catalog.sqlite_schema import SCHEMA_VERSION
from datahub.storage import drop_memory_space, open_store
from tests.api.conftest import Api, api_for
from tests.browser.conftest import browser_app, jpeg, pets_env

BUCKET = "s3://platform"


def put(key: str, url: str, etag: str = "e1", size: int = 10, **fields) -> dict:
    return {"op": "put", "record": {"key": key, "url": url, "etag": etag, "size": size, **fields}}


def commit(api: Api, dataset: str, who: str, *changes: dict):
    return api.post(f"/v1/datasets/{dataset}/commits", who, json={"changes": list(changes)})


def remote_commit(api: Api, dataset: str, who: str, *changes: dict, lineage: dict | None = None, cid="c1"):
    base = api.get(f"/v1/remote/datasets/{dataset}/head", who).json()["head"]
    header = {"base": base, "message": "m", "commit_id": cid, "lineage": lineage}
    body = "\n".join(json.dumps(line) for line in (header, *changes)) + "\n"
    return api.post(f"/v1/remote/datasets/{dataset}/commits", who, content=body)


def refused(resp, key: str, url: str) -> None:
    assert resp.status_code == 403, resp.text
    error = resp.json()["error"]
    assert error["code"] == "access_denied", error
    assert error["details"]["key"] == key and error["details"]["url"] == url
    assert "ask a global admin to add the prefix to the dataset's sources" in error["message"].lower()


@pytest.fixture
def api(config) -> Iterator[Api]:
    config.objects_url = f"{BUCKET}/objects"
    with api_for(config) as api:
        # pets (owner's; alice reads, bob writes) holds two objects of the platform's bucket
        api.catalog.commit(
            "pets",
            [
                Put(Record("secret/a.bin", f"{BUCKET}/tenants/owner/a.bin", "ea", 5)),
                Put(Record("secret/b.bin", f"{BUCKET}/tenants/owner/b.bin", "eb", 6, labels={"c": "x"})),
            ],
            message="platform objects",
        )
        yield api


# --- the confused deputy ---------------------------------------------------------------------
def _signed_in(app, secret: str) -> TestClient:
    client = TestClient(app, base_url="http://127.0.0.1")
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]
    resp = client.post("/login", data={"token": secret, "csrf": csrf, "next": "/"}, follow_redirects=False)
    assert resp.status_code == 303, resp.text
    return client


def test_a_tenant_cannot_read_another_datasets_object_through_its_own_dataset(tmp_path: Path):
    """carol may read nothing of alice's ``pets``; she creates her own dataset, commits a record
    naming one of pets' objects (in the deployment's storage), and asks the server for its
    thumbnail. Before: 201, then the picture, read with the server's stores. Now: 403."""
    space = f"memory://urlrule-{tmp_path.name}"
    with pets_env(tmp_path, local_mode=False) as env:
        platform = open_store(space, env.config)
        info = platform.put("tenants/alice/private.jpg", jpeg((1, 2, 3)))
        url = platform.url_for("tenants/alice/private.jpg")
        env.catalog.commit("pets", [Put(Record("private.jpg", url, info.etag, info.size))], author="alice")
        carol = issue_token(env.catalog.store, "carol")[0]
        bearer = {"Authorization": f"Bearer {carol}"}
        try:
            with browser_app(env) as app, TestClient(app, base_url="http://127.0.0.1") as client:
                assert client.get("/v1/datasets/pets", headers=bearer).status_code == 404
                assert client.post("/v1/datasets", json={"name": "mine"}, headers=bearer).status_code == 201
                change = put("stolen.jpg", url, info.etag, info.size)
                resp = client.post("/v1/datasets/mine/commits", json={"changes": [change]}, headers=bearer)
                assert resp.status_code == 403, "the commit must be refused, not the read left to chance"
                assert "mine" in resp.json()["error"]["message"] and url in resp.json()["error"]["message"]
                browser = _signed_in(app, carol)
                thumb = browser.get("/thumbs/mine/1/stolen.jpg")
                assert thumb.status_code == 404 and thumb.headers["content-type"] != "image/jpeg"
                # the read this guards: once such a record is in her dataset (a global admin's
                # commit is not restricted), carol gets the picture, read with the server's stores
                env.catalog.commit("mine", [Put(Record("stolen.jpg", url, info.etag, info.size))])
                thumb = browser.get("/thumbs/mine/1/stolen.jpg")
                assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
        finally:
            drop_memory_space(space.removeprefix("memory://"))


def test_a_writer_of_its_own_dataset_cannot_name_the_platforms_objects(api: Api):
    assert api.post("/v1/datasets", "eve", json={"name": "evil"}).status_code == 201
    url = f"{BUCKET}/tenants/owner/a.bin"
    refused(commit(api, "evil", "eve", put("a.bin", url, "ea", 5)), "a.bin", url)
    refused(remote_commit(api, "evil", "eve", put("a.bin", url, "ea", 5)), "a.bin", url)
    other = "s3://any-bucket-the-keys-read/x"
    refused(commit(api, "evil", "eve", put("x", other)), "x", other)
    # nothing was written
    assert api.get("/v1/datasets/evil", "eve").json()["head"] == 0


def test_a_refused_put_anywhere_in_a_commit_writes_nothing(api: Api):
    api.patch("/v1/datasets/pets", json={"sources": [f"{BUCKET}/pets/"]})
    ok = [put(f"ok/{i:04d}", f"{BUCKET}/pets/{i}") for i in range(1500)]  # more than one batch
    bad = put("zz", f"{BUCKET}/tenants/other/z")
    refused(commit(api, "pets", "bob", *ok[:700], bad, *ok[700:]), "zz", f"{BUCKET}/tenants/other/z")
    assert api.get("/v1/datasets/pets").json()["head"] == 2


# --- (a) sources -------------------------------------------------------------------------------
def test_only_global_admins_set_sources_and_get_shows_them(api: Api):
    resp = api.patch("/v1/datasets/pets", "owner", json={"sources": [f"{BUCKET}/pets/"]})
    assert resp.status_code == 403 and "global admin" in resp.json()["error"]["message"]
    assert api.get("/v1/datasets/pets", "owner").json()["sources"] == []
    resp = api.patch("/v1/datasets/pets", json={"sources": ["S3://platform/pets/", "s3://platform/pets/"]})
    assert resp.status_code == 200 and resp.json()["sources"] == ["s3://platform/pets/"]
    assert api.get("/v1/datasets/pets", "alice").json()["sources"] == ["s3://platform/pets/"]
    assert api.catalog.get_dataset("pets").sources == ("s3://platform/pets/",)


@pytest.mark.parametrize(
    "bad",
    [
        "s3://platform/pets",  # not a folder: would cover pets2/
        "file:///data/",  # the server's disk: global admins only, never a source
        "rados://pool/",
        "s3:///x/",
        "s3://platform/a/../b/",
        "s3://platform/a%2F/",
        "https://example.org/",
        "",
    ],
)
def test_invalid_sources_are_refused(api: Api, bad: str):
    resp = api.patch("/v1/datasets/pets", json={"sources": [bad]})
    assert resp.status_code in (400, 422), resp.text
    assert api.get("/v1/datasets/pets").json()["sources"] == []


def test_a_writer_may_put_under_the_datasets_sources_only(api: Api):
    api.patch("/v1/datasets/pets", json={"sources": [f"{BUCKET}/pets/"]})
    assert commit(api, "pets", "bob", put("new/1", f"{BUCKET}/pets/new/1")).status_code == 201
    assert commit(api, "pets", "bob", put("new/2", "S3://platform/pets/new/2")).status_code == 201
    # '%2E%2E' is not an escape the storage layer decodes: it names that literal key, under pets/
    assert commit(api, "pets", "bob", put("new/4", f"{BUCKET}/pets/%2E%2E/x")).status_code == 201
    for url in (
        f"{BUCKET}/pets2/x",  # a sibling prefix
        f"{BUCKET}/pets/../tenants/owner/a.bin",  # dot segments
        f"{BUCKET}/pets/./x",
        f"{BUCKET}/tenants/owner/a.bin",
        "s3://platform2/pets/x",
    ):
        refused(commit(api, "pets", "bob", put("new/3", url)), "new/3", url)


def test_the_servers_commit_sources_allow_a_prefix_for_every_dataset(config):
    config.api.commit_sources = f"{BUCKET}/shared/ s3://public-data/"
    with api_for(config) as api:
        assert commit(api, "pets", "bob", put("s/1", f"{BUCKET}/shared/1")).status_code == 201
        assert commit(api, "pets", "bob", put("s/2", "s3://public-data/2")).status_code == 201
        url = f"{BUCKET}/tenants/x"
        refused(commit(api, "pets", "bob", put("s/3", url)), "s/3", url)


# --- (b) records the caller may already read -----------------------------------------------------
def test_a_label_edit_re_puts_the_record_at_its_key(api: Api):
    url = f"{BUCKET}/tenants/owner/b.bin"
    relabelled = put("secret/b.bin", url, "eb", 6, labels={"c": "y"})
    assert commit(api, "pets", "bob", relabelled).status_code == 201
    # the same URL at another key, or with another etag or size, is not a label edit
    refused(commit(api, "pets", "bob", put("elsewhere", url, "eb", 6)), "elsewhere", url)
    refused(commit(api, "pets", "bob", put("secret/b.bin", url, "other", 6)), "secret/b.bin", url)
    refused(commit(api, "pets", "bob", put("secret/b.bin", url, "eb", 7)), "secret/b.bin", url)


def test_a_copy_names_a_source_version_the_caller_may_read(api: Api):
    """alice reads pets: her copy into her own dataset, with the lineage naming pets@v2, keeps
    pets' records. eve (no role on pets) cannot copy them by naming the same lineage."""
    url = f"{BUCKET}/tenants/owner/a.bin"
    copy = put("secret/a.bin", url, "ea", 5)
    for who, name in (("alice", "copy"), ("alice", "copy2"), ("eve", "evil")):
        assert api.post("/v1/datasets", who, json={"name": name}).status_code == 201
    refused(remote_commit(api, "copy", "alice", copy), "secret/a.bin", url)  # no lineage
    lineage = {"derived_from": "pets@v2", "filter": "all"}
    assert remote_commit(api, "copy", "alice", copy, lineage=lineage).status_code == 201
    refused(remote_commit(api, "evil", "eve", copy, lineage=lineage), "secret/a.bin", url)
    missing = {"derived_from": "pets@v9"}  # a version that is not there proves nothing
    refused(remote_commit(api, "copy2", "alice", copy, lineage=missing), "secret/a.bin", url)
    # once copied, the record is copy's own: a later label edit there needs no lineage
    relabel = put("secret/a.bin", url, "ea", 5, labels={"k": "v"})
    assert remote_commit(api, "copy", "alice", relabel, cid="c3").status_code == 201


# --- pack finalizes -------------------------------------------------------------------------------
def _pack_job(api: Api, job: str, target: str, worker_root: str) -> list[dict]:
    """A job of the server's task queue whose two tasks are DONE, each reporting its shard."""
    from datahub.pack.job import shard_object_name

    tasks = api.client.app.state.services.tasks
    tasks.create_job(job, [{"i": 0}, {"i": 1}], {"target": target, "source": "pets"})
    shards = []
    for _ in range(2):
        task = tasks.claim(job, "w", 60)
        digest = f"{task.index:02d}" * 32
        url = f"{worker_root}/{shard_object_name(job, task.index, digest)}"
        result = {
            "url": url,
            "etag": f"s{task.index}",
            "size": 100 + task.index,
            "checksum": f"sha256:{digest}",
        }
        tasks.complete(job, task.index, task.lease, result)
        shards.append(put(f"shards/{task.index:05d}-of-00002.lmdb", url, result["etag"], result["size"]))
    return shards


def test_a_writers_pack_finalize_commits_the_shards_its_job_reported(api: Api):
    """A worker finalizing over HTTP (a writer of the target, not an admin) commits the shards
    the job's tasks reported, wherever its workers' objects_url is, and the job's index."""
    shards = _pack_job(api, "job-a", "pets", "s3://worker-bucket/node1")
    index = put("index.json", "s3://worker-bucket/node1/packs/job-a/index-0123456789abcdef.json", "ix", 9)
    lineage = {"kind": "pack", "job": "job-a", "source": "pets@v2"}
    assert remote_commit(api, "pets", "bob", *shards, index, lineage=lineage).status_code == 201
    # what the job did not report is not its shard: another etag, another job's name, no lineage
    forged = put("shards/x", shards[0]["record"]["url"], "other", 100)
    refused(
        remote_commit(api, "pets", "bob", forged, lineage=lineage, cid="c2"),
        "shards/x",
        forged["record"]["url"],
    )
    other = put("index.json", "s3://worker-bucket/node1/packs/job-b/index-0123456789abcdef.json", "ix", 9)
    refused(
        remote_commit(api, "pets", "bob", other, lineage=lineage, cid="c3"),
        "index.json",
        other["record"]["url"],
    )
    theft = put("shards/y", f"{BUCKET}/tenants/owner/a.bin", "ea", 5)
    refused(
        remote_commit(api, "pets", "bob", theft, lineage=lineage, cid="c4"),
        "shards/y",
        theft["record"]["url"],
    )


def test_a_pack_job_of_another_target_allows_nothing_here(api: Api):
    shards = _pack_job(api, "job-c", "elsewhere", "s3://worker-bucket/node1")
    lineage = {"kind": "pack", "job": "job-c", "source": "pets@v2"}
    refused(remote_commit(api, "pets", "bob", shards[0], lineage=lineage), shards[0]["record"]["key"],
            shards[0]["record"]["url"])  # fmt: skip
    missing = {"kind": "pack", "job": "no-such-job", "source": "pets@v2"}
    refused(remote_commit(api, "pets", "bob", shards[0], lineage=missing, cid="c2"), shards[0]["record"]["key"],
            shards[0]["record"]["url"])  # fmt: skip


# --- (c) content-addressed blobs ------------------------------------------------------------------
def test_blobs_the_platform_names_by_content_are_allowed(api: Api):
    digest = "ab" + "cd" + "0" * 60
    blob = f"{BUCKET}/objects/blobs/sha256/ab/cd/{digest}"
    assert commit(api, "pets", "bob", put("blob", blob, checksum=f"sha256:{digest}")).status_code == 201
    for url in (
        f"{BUCKET}/objects/blobs/sha256/ab/cd/{digest[:40]}",  # not the whole hash
        f"{BUCKET}/objects/blobs/sha256/ff/cd/{digest}",  # not where the platform puts it
        f"{BUCKET}/objects/workspaces/other/{digest}",
    ):
        refused(commit(api, "pets", "bob", put("blob2", url)), "blob2", url)


def test_global_admins_are_not_restricted(api: Api):
    assert commit(api, "pets", "admin", put("any", "s3://anything/at/all")).status_code == 201


# --- the CLI ---------------------------------------------------------------------------------------
def test_the_cli_adds_and_removes_sources_through_a_server(tmp_path: Path, monkeypatch, capsys):
    from datahub.cli.main import main
    from tests.catalog.remote import serve

    server, backing, admin = serve(tmp_path)
    eve = issue_token(backing.store, "eve")[0]
    monkeypatch.delenv("DATAHUB_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)

    def dh(token: str, *args: str) -> tuple[int, str, str]:
        monkeypatch.setenv("DATAHUB_API_TOKEN", token)
        code = main(["--home", str(tmp_path / "client"), "--catalog", server.url, "--json", *args])
        out, err = capsys.readouterr()
        return code, out, err

    try:
        assert dh(eve, "dataset", "create", "evs")[0] == 0
        code, _, err = dh(eve, "dataset", "update", "evs", "--add-source", "s3://b/eve/")
        assert code == 6 and "only global admins may set the sources" in err, err
        code, out, err = dh(
            admin, "dataset", "update", "evs", "--add-source", "s3://b/eve/", "--add-source", "s3://c/"
        )
        assert code == 0 and json.loads(out)["sources"] == ["s3://b/eve/", "s3://c/"], err
        code, out, err = dh(admin, "dataset", "update", "evs", "--remove-source", "s3://c/")
        assert code == 0 and json.loads(out)["sources"] == ["s3://b/eve/"], err
        code, _, err = dh(admin, "dataset", "update", "evs", "--add-source", "s3://b/no-slash")
        assert code == 2 and "invalid source 's3://b/no-slash'" in err, err
        assert backing.get_dataset("evs").sources == ("s3://b/eve/",)
    finally:
        server.stop()
        backing.close()


# --- the stored field ------------------------------------------------------------------------------
def test_a_sqlite_catalog_from_before_sources_gets_the_column_and_keeps_its_directory_table(tmp_path: Path):
    import sqlite3

    from datahub.catalog import open_catalog

    url = f"sqlite:///{tmp_path / 'c.db'}"
    catalog = open_catalog(url)
    catalog.create_dataset("d")
    catalog.commit("d", [Put(Record("a/x", "s3://b/a/x", "e", 1))])
    catalog.close()
    conn = sqlite3.connect(tmp_path / "c.db")
    conn.execute("ALTER TABLE datasets DROP COLUMN sources")  # a file of schema version 4
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()
    catalog = open_catalog(url)
    try:
        assert catalog.get_dataset("d").sources == ()
        assert catalog.update_dataset("d", sources=["S3://b/a/"]).sources == ("s3://b/a/",)
        assert catalog.get_dataset("d").sources == ("s3://b/a/",)
    finally:
        catalog.close()
    conn = sqlite3.connect(tmp_path / "c.db")
    try:  # version 4 already kept the directory table: the upgrade (to 5, then on) must not drop it
        assert conn.execute("SELECT dirs FROM datasets").fetchone() == (1,)
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["sqlite", "mongomock", "http"])
def test_every_store_keeps_a_datasets_sources(kind: str, tmp_path: Path):
    from datahub.catalog import Catalog
    from tests.catalog.conftest import make_store

    catalog = Catalog(make_store(kind, tmp_path))
    try:
        catalog.create_dataset("d", owner="o")
        assert catalog.get_dataset("d").sources == ()
        updated = catalog.update_dataset("d", sources=["s3://b/x/", "MEMORY://m/"])
        assert updated.sources == ("s3://b/x/", "memory://m/") == catalog.get_dataset("d").sources
        assert [d.sources for d in catalog.list_datasets()] == [("s3://b/x/", "memory://m/")]
        assert catalog.update_dataset("d", description="other").sources == ("s3://b/x/", "memory://m/")
        assert catalog.update_dataset("d", sources=[]).sources == ()
    finally:
        catalog.store.close()
