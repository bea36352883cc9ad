"""Fixtures for import tests: a real SQLite catalog and store registry under the test's config."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from datahub.catalog import Catalog, open_catalog
from datahub.config import Config
from datahub.storage import StoreRegistry


@pytest.fixture
def catalog(config: Config) -> Iterator[Catalog]:
    config.home_path.mkdir(parents=True, exist_ok=True)
    cat = open_catalog(config.resolved_catalog_url)
    try:
        yield cat
    finally:
        cat.close()


@pytest.fixture
def stores(config: Config) -> Iterator[StoreRegistry]:
    with StoreRegistry(config) as registry:
        yield registry


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for key, data in files.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root
