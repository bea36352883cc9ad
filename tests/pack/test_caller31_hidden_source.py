"""caller31: a pack's target does not name its source to a reader who may not read the source.

``secretsrc`` (photos, owned by bob; alice may read it) is packed into ``packed``, which eve
and alice may read. The version's lineage was already hidden from eve (datahub.api.lineage);
the target still named its source everywhere else: the dataset's description ``packed from
secretsrc@v1``, the records' URLs ``packs/<job>/…`` (the job id is a hash of the source's name
and version, the target and the parameters, all of which eve knows but the name: a guess
could be confirmed), ``index.json``'s ``source`` and ``job``, and each shard's own index. Now
none of the API's dataset, version and record answers, the browser's pages, nor the bytes of
the index and the shards (what a mount shows) name the source or the job to eve, while
alice still sees the provenance in the lineage. Packs made before (their index and shards
with ``source`` and ``job``, objects under ``packs/<job>/``, a description naming the source)
still read with PackedDataset, and an old job's resume keeps its objects where they were.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog.model import Put, Record
from datahub.pack import INDEX_KEY, PackSpec, pack, start_job, work
from datahub.pack.job import finalize
from datahub.pack.shard import ShardReader, ShardWriter
from datahub.pack.worker import PackServices
from datahub.tasks import open_task_queue
from tests.browser.conftest import Env, browser_app, make_env
from tests.browser.test_access import signed_in, token
from tests.pack.conftest import import_manifest, write_source

SPEC = PackSpec.parse(resize="shorter=32", shard_size="20KB")


@pytest.fixture
def packed(tmp_path: Path) -> Iterator[tuple[Env, int, str]]:
    """(env, the source's version, the job id) with ``packed@v1`` made from ``secretsrc``."""
    env = make_env(tmp_path, local_mode=False)
    try:
        seq = import_manifest(env.catalog, env.config, write_source(tmp_path / "src", 5), "secretsrc")
        env.catalog.update_dataset("secretsrc", owner="bob", acl={"alice": "reader"})
        result = pack(env.config, env.catalog, f"secretsrc@v{seq}", "packed", SPEC, workers=0)
        assert result.shards >= 2
        env.catalog.update_dataset("packed", owner="bob", acl={"eve": "reader", "alice": "reader"})
        yield env, seq, result.job
    finally:
        env.stores.close()
        env.catalog.close()


def _object_bytes(env: Env, record: Record) -> bytes:
    store, key = env.stores.for_url(record.url)
    return store.read(key, etag=record.etag)


def _files(env: Env, dataset: str, tmp: Path) -> dict[str, bytes]:
    """Each record's bytes, and each shard's own index (what a reader of the mount reads)."""
    out = {}
    for record in env.catalog.list_records(dataset, None):
        data = _object_bytes(env, record)
        out[record.key] = data
        if record.key.endswith(".lmdb"):
            path = tmp / record.key.replace("/", "_")
            path.write_bytes(data)
            reader = ShardReader(path)
            out[record.key + " index"] = json.dumps(reader.index()).encode()
            reader.close()
    return out


def _answers(env: Env, who: str) -> dict[str, str]:
    """What the API and the browser answer ``who`` about ``packed``."""
    secret = token(env, who)
    bearer = {"Authorization": f"Bearer {secret}"}
    with browser_app(env) as app:
        client = signed_in(app, secret)
        routes = [
            "/v1/datasets",
            "/v1/datasets/packed",
            "/v1/datasets/packed/versions",
            "/v1/datasets/packed/versions/1",
            "/v1/datasets/packed/versions/1/records",
            f"/v1/datasets/packed/versions/1/records/{INDEX_KEY}",
            "/v1/datasets/packed/versions/1/export",
        ]
        answers = {}
        for route in routes:
            got = client.get(route, headers=bearer)
            assert got.status_code == 200, (route, got.text[:300])
            answers[route] = got.text
        for page in ("/", "/datasets/packed", "/datasets/packed/versions/1"):
            got = client.get(page)
            assert got.status_code == 200, (page, got.text[:300])
            answers[page] = got.text
    return answers


def test_a_reader_of_the_target_only_never_learns_the_source(packed, tmp_path: Path) -> None:
    env, seq, job = packed
    for where, text in _answers(env, "eve").items():
        assert "secretsrc" not in text and job not in text, where
    for key, data in _files(env, "packed", tmp_path).items():
        assert b"secretsrc" not in data and job.encode() not in data, key
    index = json.loads(_object_bytes(env, env.catalog.get_record("packed", None, INDEX_KEY)))
    assert "source" not in index and "job" not in index
    # the pack still reads: the format, the shards and their keys are all there
    assert index["count"] == 5 and [k for s in index["shards"] for k in s["keys"]] == [
        f"img/{i:05d}.jpg" for i in range(5)
    ]


def test_a_reader_of_both_still_sees_the_provenance(packed) -> None:
    env, seq, job = packed
    version = json.loads(_answers(env, "alice")["/v1/datasets/packed/versions/1"])
    lineage = version["lineage"]
    assert (lineage["source"], lineage["source_dataset"], lineage["source_version"], lineage["job"]) == (
        f"secretsrc@v{seq}",
        "secretsrc",
        seq,
        job,
    )
    assert version["message"] == f"pack secretsrc@v{seq}"
    assert env.catalog.resolve("packed").lineage["source"] == f"secretsrc@v{seq}"  # as committed


def test_an_old_description_naming_the_source_is_hidden_from_a_reader_of_the_target_only(packed) -> None:
    """A target ``datahub pack`` created before says ``packed from secretsrc@v1``: eve sees the
    source hidden, alice (who may read it) the description as written."""
    env, seq, _ = packed
    env.catalog.update_dataset("packed", description=f"packed from secretsrc@v{seq}")
    for where, text in _answers(env, "eve").items():
        assert "secretsrc" not in text, where
    assert "packed from (hidden dataset)" in _answers(env, "eve")["/v1/datasets/packed"]
    alice = _answers(env, "alice")
    assert json.loads(alice["/v1/datasets/packed"])["description"] == f"packed from secretsrc@v{seq}"
    assert f"packed from secretsrc@v{seq}" in alice["/datasets/packed"]


def test_a_pack_written_before_still_reads(packed, tmp_path: Path) -> None:
    """An index and shards with ``source`` and ``job`` (as packs were written before), under
    ``packs/<job>/``: PackedDataset reads every sample of it."""
    pytest.importorskip("torch")
    from datahub.torch import CacheSource, PackedDataset

    env, seq, job = packed
    catalog, objects = env.catalog, env.objects
    index = json.loads(_object_bytes(env, catalog.get_record("packed", None, INDEX_KEY)))
    puts = []
    for shard in index["shards"]:
        record = catalog.get_record("packed", None, shard["record"])
        path = tmp_path / "old.lmdb"
        path.write_bytes(_object_bytes(env, record))
        reader = ShardReader(path)
        samples = {key: bytes(reader.get(key)) for key in reader.iter_keys()}
        reader.close()
        old = tmp_path / f"old-{len(puts)}.lmdb"
        writer = ShardWriter(old)
        for key, value in samples.items():
            writer.put(key, value)
        writer.finish({"job": job, "task": len(puts), "source": f"secretsrc@v{seq}"})
        info = objects.put(f"packs/{job}/{old.name}", old.read_bytes())
        puts.append(
            Put(Record(shard["record"], objects.url_for(f"packs/{job}/{old.name}"), info.etag, info.size))
        )
    index.update(job=job, source=f"secretsrc@v{seq}")
    info = objects.put(f"packs/{job}/index-old.json", json.dumps(index).encode())
    puts.append(Put(Record(INDEX_KEY, objects.url_for(f"packs/{job}/index-old.json"), info.etag, info.size)))
    lineage = dict(catalog.resolve("packed").lineage)
    catalog.commit("packed", puts, base=1, message=f"pack secretsrc@v{seq}", lineage=lineage)
    source = CacheSource(env.config)
    try:
        for ref in ("v1", "v2"):
            dataset = PackedDataset.open(catalog, source, "packed", ref, cache_dir=tmp_path / ref)
            assert len(dataset) == 5
            assert [dataset.locate(i)[1] for i in range(5)] == [f"img/{i:05d}.jpg" for i in range(5)]
            assert all(dataset[i] is not None for i in range(5))
    finally:
        source.close()


def test_a_job_started_before_resumes_with_its_objects_where_they_were(tmp_path: Path) -> None:
    """A job whose meta has no ``objects`` name (started before there was one) uploads and
    finalizes under ``packs/<job>/``, where its DONE shards already are; a new job's objects
    are under a name that is not its id."""
    env = make_env(tmp_path, local_mode=False)
    try:
        seq = import_manifest(env.catalog, env.config, write_source(tmp_path / "src", 3), "secretsrc")
        queue = open_task_queue(env.config.resolved_catalog_url)
        try:
            job = start_job(env.catalog, queue, f"secretsrc@v{seq}", "packed", SPEC)
            meta = dict(job.meta)
            assert len(meta.pop("objects")) == 32
            queue.create_job(job.job, [t.payload for t in queue.tasks(job.job)], meta)  # as before
            assert start_job(env.catalog, queue, f"secretsrc@v{seq}", "packed", SPEC).meta == meta
            services = PackServices.open(env.config)
            try:
                work(services, job.job)
                result = finalize(env.catalog, queue, services.objects, job.job, stores=services.stores)
            finally:
                services.close()
        finally:
            queue.close()
        urls = [r.url for r in env.catalog.list_records("packed", result.version.seq)]
        assert urls and all(f"/packs/{job.job}/" in url for url in urls), urls
    finally:
        env.stores.close()
        env.catalog.close()
