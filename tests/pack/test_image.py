"""The image transform: draft-mode quality, geometry, orientation, and bad images."""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Callable

import pytest

from datahub.errors import BadImage, ImageTooLarge
from datahub.pack.image import image_size, psnr, synthetic_photo, transform_image
from datahub.pack.spec import TransformSpec


@functools.cache
def photos() -> tuple[bytes, ...]:
    """Two 1200x900 synthetic photos, made once, when a test first asks: not at import, which
    every xdist worker pays for collecting this module (0.25 CPU-s each, suite36)."""
    return tuple(synthetic_photo(1200, 900, seed) for seed in range(2))


@pytest.mark.parametrize(
    "spec",
    [
        TransformSpec(resize="shorter=256"),
        TransformSpec(resize="224x224", crop="center"),
        TransformSpec(resize="160x120"),
        TransformSpec(resize="shorter=100", format="webp"),
    ],  # fmt: skip
    ids=lambda s: f"{s.resize}-{s.crop or 'nocrop'}-{s.format}",
)
def test_draft_mode_matches_the_reference_resize(spec: TransformSpec) -> None:
    for i, photo in enumerate(photos()):
        fast = transform_image(photo, spec, key=f"p{i}.jpg")
        reference = transform_image(photo, spec, key=f"p{i}.jpg", draft=False)
        assert (fast.width, fast.height) == (reference.width, reference.height)
        assert psnr(fast.data, reference.data) >= 35.0


def test_geometry() -> None:
    photo = photos()[0]  # 1200x900
    assert image_size(transform_image(photo, TransformSpec(resize="shorter=256"), key="k").data) == (341, 256)
    crop = transform_image(photo, TransformSpec(resize="224x224", crop="center"), key="k")
    assert (crop.width, crop.height) == (224, 224) and image_size(crop.data) == (224, 224)
    assert image_size(transform_image(photo, TransformSpec(resize="100x50"), key="k").data) == (100, 50)
    small = synthetic_photo(200, 150, 7)
    same = transform_image(small, TransformSpec(resize="shorter=256"), key="k")
    assert same.data == small  # never enlarged, already JPEG: passed through untouched


def test_exif_orientation_and_explicit_rotation() -> None:
    rotated = synthetic_photo(400, 300, 1, orientation=6)  # stored landscape, shown portrait
    upright = transform_image(rotated, TransformSpec(resize="shorter=150"), key="k")
    assert (upright.width, upright.height) == (150, 200)
    as_stored = transform_image(rotated, TransformSpec(resize="shorter=150", rotate="none"), key="k")
    assert (as_stored.width, as_stored.height) == (200, 150)
    turned = transform_image(photos()[0], TransformSpec(resize="shorter=90", rotate="90"), key="k")
    assert (turned.width, turned.height) == (90, 120)


def test_zero_byte_image_is_a_clear_error() -> None:
    with pytest.raises(BadImage, match=r"'a/empty.jpg' is empty \(zero bytes\)"):
        transform_image(b"", TransformSpec(resize="shorter=64"), key="a/empty.jpg")


@pytest.mark.parametrize(
    "made",
    [lambda: b"this is not an image", lambda: photos()[0][: len(photos()[0]) // 3],
     lambda: b"\xff\xd8\xff\xe0" + b"\x00" * 100],
    ids=["garbage", "truncated", "bad-header"],
)  # fmt: skip
def test_corrupt_image_names_the_key(made: Callable[[], bytes]) -> None:
    data = made()
    with pytest.raises(BadImage, match="'cats/7.jpg' cannot be decoded") as info:
        transform_image(data, TransformSpec(resize="shorter=64"), key="cats/7.jpg")
    assert info.value.details["key"] == "cats/7.jpg"


def _png_header_only(width: int, height: int) -> bytes:
    """A tiny PNG claiming ``width`` x ``height`` pixels: a decompression bomb's header."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )


def test_decompression_bomb_is_refused_before_decoding() -> None:
    with pytest.raises(ImageTooLarge, match=r"'huge.png' is too large to decode safely"):
        transform_image(
            _png_header_only(100_000, 100_000), TransformSpec(resize="shorter=64"), key="huge.png"
        )
    with pytest.raises(ImageTooLarge, match=r"'big.png' is 10000x10000 = 100000000 pixels"):
        transform_image(_png_header_only(10_000, 10_000), TransformSpec(resize="shorter=64"), key="big.png")
    with pytest.raises(ImageTooLarge, match="over the limit of 10000"):
        transform_image(photos()[0], TransformSpec(resize="shorter=64", max_pixels=10_000), key="big.jpg")


def test_invalid_specs_are_refused() -> None:
    for kwargs in ({"resize": "big"}, {"resize": "shorter=256", "crop": "center"}, {"format": "gif"},
                   {"rotate": "45"}, {"quality": 0}, {"resize": "0x10"}):  # fmt: skip
        with pytest.raises(Exception, match="invalid|needs"):
            TransformSpec(**kwargs)
