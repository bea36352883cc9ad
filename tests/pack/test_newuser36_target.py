"""newuser36: ``datahub pack SRC --to DST`` where DST is a dataset no pack made.

The pack's commit makes the target's records exactly its shards and index, deleting every
record of the head, so ``pack photos --to pets`` with ``pets`` an imported dataset left
``pets`` a head of shards alone, without a word. It is refused before anything is planned or
written, naming the dataset and its head; a missing target, an empty one and a target a pack
made (a new pack of it) go on as before.
"""

from __future__ import annotations

from pathlib import Path

from datahub.catalog import Catalog
from datahub.cli.main import main as cli
from datahub.config import Config
from tests.pack.conftest import import_manifest, write_source


def test_a_target_holding_an_imported_version_is_refused_naming_it(
    config: Config, catalog: Catalog, tmp_path: Path, capsys
) -> None:
    import_manifest(catalog, config, write_source(tmp_path / "src", 2), "photos")
    import_manifest(catalog, config, write_source(tmp_path / "pets", 1), "pets")
    base = ["--home", config.home]
    capsys.readouterr()
    assert cli([*base, "pack", "photos", "--to", "pets", "--resize", "shorter=30", "--workers", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: pack target 'pets' holds versions no pack made (pets@v1, 1 record:"), err
    assert "would delete every record of its head: give a new dataset, e.g. --to photos-packed" in err, err
    assert [v.seq for v in catalog.log("pets")] == [1]  # nothing committed over it
    # a new target, then a second pack of it (another size): both go on
    for size in ("shorter=30", "shorter=20"):
        assert cli([*base, "pack", "photos", "--to", "packed", "--resize", size, "--workers", "0"]) == 0
    assert [v.seq for v in catalog.log("packed")] == [2, 1]
