"""leftovers34: ``VersionDataset.from_catalog`` refuses an empty selection when the dataset is
built, with InvalidInput naming the version, the prefix and the filter, and what to do.

Before, a browser page's PyTorch script whose filter matched nothing built the dataset and
died inside torch (``ValueError: num_samples=0`` from the DataLoader's RandomSampler), naming
neither the selection nor what to change.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import Catalog, open_catalog
from datahub.config import Config
from datahub.errors import InvalidInput
from datahub.torch import CacheSource
from tests.pack.conftest import import_manifest, write_source


@pytest.fixture
def catalog(config: Config, tmp_path: Path) -> Iterator[Catalog]:
    cat = open_catalog(config.resolved_catalog_url)
    import_manifest(cat, config, write_source(tmp_path / "src", 4), "photos")
    yield cat
    cat.close()


@pytest.mark.parametrize(
    ("prefix", "where", "says"),
    [
        ("", "labels.class=7", ["photos@v1", "filter 'labels.class=7'", "where="]),
        ("nothing/", None, ["photos@v1", "prefix 'nothing/'", "prefix="]),
        ("nothing/", "labels.class=1", ["photos@v1", "prefix 'nothing/'", "filter 'labels.class=1'"]),
    ],
)
def test_an_empty_selection_is_refused_when_the_dataset_is_built(
    config: Config, catalog: Catalog, prefix: str, where: str | None, says: list[str]
) -> None:
    from datahub.torch import VersionDataset

    with pytest.raises(InvalidInput) as raised:
        VersionDataset.from_catalog(catalog, "photos", "v1", CacheSource(config), prefix=prefix, where=where)
    for words in says:
        assert words in raised.value.message
    assert raised.value.details["version"] == "photos@v1"


def test_a_selection_with_records_is_built(config: Config, catalog: Catalog) -> None:
    from datahub.torch import VersionDataset

    chosen = VersionDataset.from_catalog(catalog, "photos", "v1", CacheSource(config), where="labels.class=1")
    assert len(chosen) >= 1 and all(r.labels["class"] == 1 for r in chosen.records)
