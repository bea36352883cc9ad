"""VersionDataset over a version holding ``x`` and ``x/y`` (docs/catalog.md, "Limits"): the file
``x`` is not a sample, as a mount hides it, so the cache and a mount give the same samples at
the same indices and a MountSource never opens a directory. The real mount's part is in
tests/torch/test_mount.py (it shares that file's one mount)."""

from __future__ import annotations

import json
from pathlib import Path

from datahub.catalog import Catalog, open_catalog
from datahub.config import Config
from datahub.torch import CacheSource, MountSource  # no torch here: the tests import its classes
from tests.pack.conftest import import_manifest

# key -> (bytes, class): x.txt sorts between x and x/y
ODD = {"x": (b"file x", 0), "x.txt": (b"x.txt", 0), "x/y": (b"under x", 1), "z": (b"z", 1)}


def import_odd(catalog: Catalog, config: Config, tmp_path: Path, dataset: str = "odd") -> int:
    """``dataset`` with the keys of ODD, each from its own local file (a directory cannot hold
    both ``x`` and ``x/y``, a manifest can)."""
    objects = tmp_path / f"{dataset}-objects"
    objects.mkdir()
    lines = []
    for i, (key, (data, label)) in enumerate(ODD.items()):
        (objects / str(i)).write_bytes(data)
        lines.append({"url": (objects / str(i)).as_uri(), "key": key, "labels": {"class": label}})
    manifest = tmp_path / f"{dataset}.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return import_manifest(catalog, config, manifest, dataset)


def _raw(data, labels):
    return bytes(data), labels["class"]


def test_a_file_beside_a_directory_of_its_name_is_no_sample(config: Config, tmp_path: Path) -> None:
    from datahub.torch import VersionDataset

    catalog = open_catalog(config.resolved_catalog_url)
    try:
        seq = import_odd(catalog, config, tmp_path)
        cached = VersionDataset.from_catalog(catalog, "odd", seq, CacheSource(config), transform=_raw)
        assert [r.key for r in cached.records] == ["x.txt", "x/y", "z"]
        assert [cached[i] for i in range(3)] == [ODD[k] for k in ("x.txt", "x/y", "z")]
        # a filter selecting the file but not the keys under it: the file is still hidden
        picked = VersionDataset.from_catalog(catalog, "odd", seq, CacheSource(config), where="labels.class=0")
        assert [r.key for r in picked.records] == ["x.txt"]
        under = VersionDataset.from_catalog(catalog, "odd", seq, CacheSource(config), prefix="x")
        assert [r.key for r in under.records] == ["x.txt", "x/y"]
        # a directory laid out as the mount shows the version: every sample reads, none is a directory
        shown = tmp_path / "shown"
        for key in ("x.txt", "x/y", "z"):
            (shown / key).parent.mkdir(parents=True, exist_ok=True)
            (shown / key).write_bytes(ODD[key][0])
        mounted = VersionDataset.from_catalog(catalog, "odd", seq, MountSource(shown), transform=_raw)
        assert [mounted[i] for i in range(len(mounted))] == [cached[i] for i in range(len(cached))]
        for dataset in (cached, picked, under):
            dataset.source.close()
    finally:
        catalog.close()
