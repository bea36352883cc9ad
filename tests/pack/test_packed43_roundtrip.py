"""packed43 (guard): a packed version yields exactly its source version's image records,
each the bytes ``transform_image`` makes of the record (oriented and resized as documented),
under the record's key and with its labels, at every shard boundary; a record that is no
picture (zero bytes) is skipped and reported, never stored as another record's bytes."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from datahub.catalog import open_catalog
from datahub.config import Config
from datahub.pack import PackSpec, pack
from datahub.pack.image import synthetic_photo, transform_image
from datahub.torch import CacheSource
from tests.pack.conftest import import_manifest

_names = itertools.count()


def _picture(kind: str, width: int, height: int, seed: int) -> bytes:
    if kind == "empty":
        return b""
    if kind in ("jpeg", "exif6", "exif8"):
        return synthetic_photo(width, height, seed, orientation={"jpeg": 1, "exif6": 6, "exif8": 8}[kind])
    img = Image.new("I;16", (width, height))  # "png16": a 16-bit grey ramp
    img.putdata([(x * 997 + y * 131 + seed) % 65536 for y in range(height) for x in range(width)])
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


pictures = st.lists(
    st.tuples(
        st.sampled_from(["jpeg", "exif6", "exif8", "png16", "empty"]),
        st.integers(24, 96),
        st.integers(24, 96),
    ),
    min_size=1,
    max_size=7,
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pictures, st.sampled_from(["1B", "9KB", "1GB"]), st.sampled_from(["shorter=32", "40x30", ""]))
def test_a_packed_version_yields_its_records_transformed(
    config: Config, tmp_path: Path, files: list[tuple[str, int, int]], shard_size: str, resize: str
) -> None:
    from datahub.torch import PackedDataset

    n = next(_names)
    root = tmp_path / f"src{n}"
    root.mkdir()
    lines, want = [], {}
    spec = PackSpec.parse(resize=resize, shard_size=shard_size)
    for i, (kind, width, height) in enumerate(files):
        key = f"img/{i:03d}.{'png' if kind == 'png16' else 'jpg'}"
        data = _picture(kind, width, height, i)
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
        lines.append({"url": (root / key).as_uri(), "key": key, "labels": {"i": i}})
        if data:
            want[key] = (transform_image(data, spec.transform, key=key).data, {"i": i})
    manifest = tmp_path / f"src{n}.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    catalog = open_catalog(config.resolved_catalog_url)
    source = CacheSource(config)
    try:
        import_manifest(catalog, config, manifest, f"src{n}")
        result = pack(config, catalog, f"src{n}", f"packed{n}", spec, workers=0)
        assert sorted(s["key"] for s in result.skipped) == sorted(
            f"img/{i:03d}.jpg" for i, (kind, _, _) in enumerate(files) if kind == "empty"
        )
        if not want:
            return
        ds = PackedDataset.open(
            catalog,
            source,
            f"packed{n}",
            cache_dir=tmp_path / f"shards{n}",
            transform=lambda data, labels: (bytes(data), dict(labels)),
        )
        got = {ds.locate(i)[1]: ds[i] for i in range(len(ds))}
        assert got == want and [ds.locate(i)[1] for i in range(len(ds))] == sorted(want)
        streamed = [s for shard in range(len(ds.readers)) for s in ds.shard_samples(shard)]
        assert streamed == [want[k] for k in sorted(want)]
    finally:
        source.close()
        catalog.close()
