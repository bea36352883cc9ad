"""packed43: pictures the pack step (and the training decode) turned into other pictures.

A 16-bit grey PNG was packed as a white picture: Pillow's ``convert("RGB")`` clips every
level above 255 instead of scaling. A CMYK JPEG needing no resize was passed through as a
CMYK JPEG although the output is an RGB JPEG (docs/pack.md).
"""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from datahub.errors import ImageTooLarge
from datahub.pack.image import decode_rgb, transform_image
from datahub.pack.spec import TransformSpec

W, H = 64, 16


def grey16(levels: list[int], mode: str = "I;16") -> bytes:
    """A 16-bit grey PNG whose columns have ``levels`` (repeated to W columns)."""
    img = Image.new(mode, (W, H))
    img.putdata([levels[x % len(levels)] for _ in range(H) for x in range(W)])
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _grey(data: bytes) -> list[int]:
    return list(Image.open(io.BytesIO(data)).convert("L").get_flattened_data())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 65535), min_size=1, max_size=W))
def test_a_16_bit_grey_png_decodes_to_its_levels_scaled_to_8_bits(levels: list[int]) -> None:
    width, height, raw = decode_rgb(grey16(levels), key="g.png")
    want = [round(levels[x % len(levels)] / 257) for _ in range(H) for x in range(W)]
    assert (width, height) == (W, H) and list(raw[::3]) == want and raw[::3] == raw[1::3] == raw[2::3]


@pytest.mark.parametrize(
    "spec", [TransformSpec(), TransformSpec(resize="32x8"), TransformSpec(format="webp")]
)
def test_a_16_bit_grey_png_is_packed_as_its_picture(spec: TransformSpec) -> None:
    levels = [round(65535 * x / (W - 1)) for x in range(W)]  # a dark-to-light ramp
    out = transform_image(grey16(levels), spec, key="g.png")
    want = Image.new("L", (W, H))
    want.putdata([round(levels[x] / 257) for _ in range(H) for x in range(W)])
    want = want.resize((out.width, out.height), Image.Resampling.LANCZOS)
    got = _grey(out.data)
    error = sum(abs(a - b) for a, b in zip(got, want.get_flattened_data(), strict=True)) / len(got)
    assert error < 4  # a lossy encoding of the ramp; it was white (error ~120)


def test_a_cmyk_jpeg_is_packed_as_an_rgb_jpeg() -> None:
    cmyk = Image.new("CMYK", (40, 30), (0, 255, 255, 0))  # red
    buf = io.BytesIO()
    cmyk.save(buf, "JPEG", quality=95)
    out = transform_image(buf.getvalue(), TransformSpec(resize="shorter=256"), key="c.jpg")  # no resize
    img = Image.open(io.BytesIO(out.data))
    assert out.format == "jpeg" and img.format == "JPEG" and img.mode == "RGB"
    r, g, b = img.getpixel((20, 15))
    assert r > 240 and g < 16 and b < 16


def test_an_rgb_jpeg_needing_no_change_is_still_passed_through() -> None:
    img = Image.new("RGB", (40, 30), (10, 200, 30))
    buf = io.BytesIO()
    img.save(buf, "JPEG")
    assert (
        transform_image(buf.getvalue(), TransformSpec(resize="shorter=256"), key="k.jpg").data
        == buf.getvalue()
    )


def test_a_decompression_bomb_in_the_training_decode_names_its_record() -> None:
    import math

    from tests.pack.test_image import _png_header_only

    side = math.isqrt(3 * (Image.MAX_IMAGE_PIXELS or 10**8)) + 1  # over twice Pillow's limit, as set
    with pytest.raises(ImageTooLarge, match="'huge.png'"):  # it was PIL's own DecompressionBombError
        decode_rgb(_png_header_only(side, side), key="huge.png")
