"""review71: an open PackedDataset never serves a shard copy changed after it verified it.

A dataset keeps the LMDB handle it opened on its verified copy for its life. When that very
file was rewritten in place (another tool, a half-restored backup: the case ``_verified_copy``
guards against at open), the open dataset went on serving the changed bytes through its
mapping, and still did after another ``PackedDataset.open`` had noticed the damage and
downloaded the copy again ("an open PackedDataset reads the old shard after a re-fetch").
Now each read checks the mapped file (one ``fstat``) against the state it was verified in: a
copy changed since is left for the file at its path when that holds the shard's bytes (the
copy downloaded again), else the read is ObjectChanged naming the shard.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import Catalog
from datahub.config import Config
from datahub.errors import ObjectChanged
from tests.pack.conftest import packed_photos
from tests.torch.test_packed43_refetch import _damage_in_place, _open

N = 9


@pytest.fixture
def catalog(config: Config, tmp_path: Path) -> Iterator[Catalog]:
    with packed_photos(config, tmp_path, N) as cat:
        yield cat


def test_an_open_dataset_reads_the_copy_downloaded_again_not_the_damaged_one(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    cache_dir = tmp_path / "shards"
    first = _open(config, catalog, cache_dir)
    want = [first[i] for i in range(N)]  # every shard's handle open in this process
    _damage_in_place(first.readers[first.locate(0)[0]].path, want[0][0])
    again = _open(config, catalog, cache_dir)  # the copy no longer matches: downloaded again
    assert [again[i] for i in range(N)] == want
    assert [first[i] for i in range(N)] == want  # it served the damaged sample 0


def test_an_open_dataset_refuses_a_copy_damaged_in_place(
    config: Config, catalog: Catalog, tmp_path: Path
) -> None:
    first = _open(config, catalog, tmp_path / "shards")
    want = [first[i] for i in range(N)]
    shard = first.locate(0)[0]
    _damage_in_place(first.readers[shard].path, want[0][0])
    with pytest.raises(ObjectChanged) as caught:
        first[0]  # it returned the damaged sample
    assert "photos-packed@v1" in caught.value.message
    assert str(first.readers[shard].path) in caught.value.message
    assert "open the dataset again" in caught.value.message
