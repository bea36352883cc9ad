"""The DHS1 sample layout, LMDB shard files, and the deterministic task split."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from datahub.catalog import Record
from datahub.errors import InvalidInput
from datahub.pack.layout import KIND_IMAGE, KIND_RAW, Sample, decode_sample, encode_sample
from datahub.pack.plan import job_id, split
from datahub.pack.shard import ShardReader, ShardWriter
from datahub.pack.spec import PackSpec


def test_layout_round_trip_and_documented_header() -> None:
    sample = Sample("a/b.jpg", KIND_IMAGE, b"\xff\xd8jpeg", "jpeg", 224, 160, {"class": 3}, {"split": "train"},
                    {"url": "s3://b/a/b.jpg", "etag": "e1"})  # fmt: skip
    value = encode_sample(sample)
    assert value[:4] == b"DHS1" and value[4] == KIND_IMAGE
    assert int.from_bytes(value[8:12], "little") == 224 and int.from_bytes(value[12:16], "little") == 160
    back = decode_sample("a/b.jpg", value)
    assert bytes(back.payload) == b"\xff\xd8jpeg"
    assert (back.format, back.width, back.height, dict(back.labels), dict(back.meta)) == (
        "jpeg", 224, 160, {"class": 3}, {"split": "train"})  # fmt: skip
    raw = decode_sample("n.txt", encode_sample(Sample("n.txt", KIND_RAW, b"text")))
    assert (raw.kind, bytes(raw.payload)) == (KIND_RAW, b"text")
    with pytest.raises(InvalidInput, match="'x' is truncated"):
        decode_sample("x", b"DHS1")
    with pytest.raises(InvalidInput, match="unknown layout"):
        decode_sample("x", b"PNG!" + bytes(40))


def test_shard_write_read_index_and_no_leftovers(tmp_path: Path) -> None:
    writer = ShardWriter(tmp_path / "s.lmdb")
    for i in range(50):
        writer.put(f"k/{i:03d}", encode_sample(Sample(f"k/{i:03d}", KIND_RAW, os.urandom(1000))))
    with pytest.raises(InvalidInput, match="not after"):
        writer.put("a", b"x")
    index = writer.finish({"task": 7})
    assert os.listdir(tmp_path) == ["s.lmdb"]  # no scratch, tmp or lock files left
    assert (index["count"], index["first"], index["last"], index["task"]) == (50, "k/000", "k/049", 7)
    reader = ShardReader(tmp_path / "s.lmdb")
    assert list(reader.iter_keys()) == [f"k/{i:03d}" for i in range(50)]  # the index key is hidden
    assert reader.index()["count"] == 50
    assert len(decode_sample("k/007", reader.get("k/007")).payload) == 1000
    with pytest.raises(InvalidInput, match="no sample 'zzz'"):
        reader.get("zzz")
    clone = pickle.loads(pickle.dumps(reader))  # what a DataLoader worker receives: no open handle
    assert clone._env is None and clone.get("k/001") == reader.get("k/001")
    reader.close()


def _records(sizes: list[int], prefix: str = "img/", suffix: str = ".jpg") -> list[Record]:
    return [Record(f"{prefix}{i:04d}{suffix}", f"file:///x/{i}", "e", n) for i, n in enumerate(sizes)]


def test_split_is_deterministic_contiguous_and_bounded() -> None:
    spec = PackSpec.parse(shard_size=100)
    records = _records([30, 30, 30, 30, 200, 10, 10])
    tasks = split(records, spec, source="d@v1")
    assert tasks == split(list(records), spec, source="d@v1")
    assert [(t["start_after"], t["last"], t["count"]) for t in tasks] == [
        ("", "img/0003.jpg", 4), ("img/0003.jpg", "img/0004.jpg", 1), ("img/0004.jpg", "img/0006.jpg", 2)]  # fmt: skip
    assert sum(t["count"] for t in tasks) == len(records)


def test_job_id_depends_on_inputs_but_not_on_the_corrupt_policy() -> None:
    a = PackSpec.parse(resize="shorter=256")
    assert job_id("d", 3, "out", a) == job_id(
        "d", 3, "out", PackSpec.parse(resize="shorter=256", on_corrupt="fail")
    )
    assert job_id("d", 3, "out", a) != job_id("d", 4, "out", a)
    assert job_id("d", 3, "out", a) != job_id("d", 3, "out", PackSpec.parse(resize="shorter=224"))
