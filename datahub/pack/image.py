"""Image decoding, geometry and encoding: the one module that imports Pillow.

Speed comes from JPEG draft mode: ``Image.draft`` asks libjpeg to decode at 1/2, 1/4 or
1/8 scale straight from the DCT coefficients, so a 4000 px photo bound for 256 px never
exists at full size. Draft picks the smallest DCT scale that still covers the target
(``DRAFT_GAP`` = 1: never below the target), and a LANCZOS resize then brings it to the
exact size. Measured against a full decode + LANCZOS the result stays at ~44 dB PSNR
(tests require >= 35 dB); a gap of 2 (Pillow's thumbnail default) bought ~1.5 dB more
but lost the speed-up whenever the shrink factor is below 4, e.g. 1024x768 -> 256
(see docs/benchmarks/pack.md).

Every failure becomes BadImage / ImageTooLarge naming the record key, so a pack job can
report it and skip the record or stop, as the user chose.
"""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass

from PIL import Image, ImageChops, ImageStat, UnidentifiedImageError

from datahub.errors import BadImage, ImageTooLarge
from datahub.pack.spec import TransformSpec

DRAFT_GAP = 1.0  # draft scale must cover the target size by at least this factor
_EXIF_ORIENTATION = 0x0112
# EXIF orientation -> transposes that make the picture upright (None: already upright)
_ORIENT: dict[int, tuple[Image.Transpose, ...]] = {
    2: (Image.Transpose.FLIP_LEFT_RIGHT,),
    3: (Image.Transpose.ROTATE_180,),
    4: (Image.Transpose.FLIP_TOP_BOTTOM,),
    5: (Image.Transpose.TRANSPOSE,),
    6: (Image.Transpose.ROTATE_270,),
    7: (Image.Transpose.TRANSVERSE,),
    8: (Image.Transpose.ROTATE_90,),
}
_ROTATE = {
    "90": Image.Transpose.ROTATE_90,
    "180": Image.Transpose.ROTATE_180,
    "270": Image.Transpose.ROTATE_270,
}
_SWAPS_AXES = {Image.Transpose.TRANSPOSE, Image.Transpose.TRANSVERSE, Image.Transpose.ROTATE_90,
               Image.Transpose.ROTATE_270}  # fmt: skip
_PIL_FORMAT = {"jpeg": "JPEG", "webp": "WEBP"}
_SIXTEEN_BIT = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})  # 16-bit grey (PNG, TIFF)
# modes passed through byte for byte when nothing else changes. Why not CMYK (or YCbCr) JPEGs:
# the output is an RGB JPEG (docs/pack.md); a CMYK one reaches decoders that read no CMYK,
# or read Adobe's inverted CMYK otherwise than Pillow (packed43)
_PASS_MODES = frozenset({"RGB", "L", "RGBA"})
_DECODE_ERRORS = (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError)


@dataclass(frozen=True, slots=True)
class EncodedImage:
    data: bytes
    width: int
    height: int
    format: str  # "jpeg" | "webp"; the source format when passed through unchanged


def transform_image(data: bytes, spec: TransformSpec, *, key: str, draft: bool = True) -> EncodedImage:
    """Decode ``data``, orient, resize/crop per ``spec`` and encode; BadImage names ``key``.

    ``draft=False`` is the reference path (full decode, then LANCZOS) used to check quality.
    """
    if not data:
        raise BadImage(f"image {key!r} is empty (zero bytes): re-import it or exclude it", key=key)
    try:
        with warnings.catch_warnings():
            # our own limit (checked below) decides; Pillow still refuses > 2x its own limit
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))  # reads the header only
            _check_pixels(img, spec, key)
            return _transform(img, data, spec, draft)
    except (BadImage, ImageTooLarge):
        raise
    except Image.DecompressionBombError as exc:
        raise ImageTooLarge(f"image {key!r} is too large to decode safely: {exc}", key=key) from exc
    except UnidentifiedImageError as exc:
        raise BadImage(f"image {key!r} cannot be decoded: not a recognised image format", key=key) from exc
    except _DECODE_ERRORS as exc:
        raise BadImage(f"image {key!r} cannot be decoded ({type(exc).__name__}: {exc})", key=key) from exc


def _check_pixels(img: Image.Image, spec: TransformSpec, key: str) -> None:
    width, height = img.size
    if width * height > spec.max_pixels:
        raise ImageTooLarge(
            f"image {key!r} is {width}x{height} = {width * height} pixels, over the limit of "
            f"{spec.max_pixels} (a decompression bomb guard); raise max_pixels if it is genuine",
            key=key,
            width=width,
            height=height,
        )


def _transform(img: Image.Image, data: bytes, spec: TransformSpec, draft: bool) -> EncodedImage:
    transposes = _transposes(img, spec)
    width, height = img.size
    if any(t in _SWAPS_AXES for t in transposes):
        width, height = height, width
    size, crop = _geometry(width, height, spec)
    if (
        not transposes
        and size == (width, height)
        and crop is None
        and img.format == _PIL_FORMAT[spec.format]
        and img.mode in _PASS_MODES
    ):
        img.load()  # validates the whole stream before we vouch for the bytes
        return EncodedImage(data, width, height, spec.format)
    if draft and img.format == "JPEG" and size != (width, height):
        request = (math.ceil(size[0] * DRAFT_GAP), math.ceil(size[1] * DRAFT_GAP))
        if any(t in _SWAPS_AXES for t in transposes):
            request = (request[1], request[0])
        img.draft("RGB", request)
    mode = "RGBA" if spec.format != "jpeg" and _has_alpha(img) else "RGB"
    out = _eight_bit(img).convert(mode)  # decodes (at the draft scale, if any)
    for t in transposes:
        out = out.transpose(t)
    if out.size != size:
        out = out.resize(size, Image.Resampling.LANCZOS)
    if crop is not None:
        out = out.crop(crop)
    buf = io.BytesIO()
    out.save(buf, _PIL_FORMAT[spec.format], quality=spec.quality)
    return EncodedImage(buf.getvalue(), out.width, out.height, spec.format)


def _transposes(img: Image.Image, spec: TransformSpec) -> tuple[Image.Transpose, ...]:
    if spec.rotate == "exif":
        return _ORIENT.get(img.getexif().get(_EXIF_ORIENTATION, 1), ())
    if spec.rotate == "none":
        return ()
    return (_ROTATE[spec.rotate],)


def _geometry(width: int, height: int, spec: TransformSpec) -> tuple[tuple[int, int], tuple | None]:
    """Resize target and optional crop box for an upright ``width`` x ``height`` picture."""
    if spec.shorter is not None:
        scale = spec.shorter / min(width, height)
        if scale >= 1:  # never enlarge to reach "shorter"; small pictures stay as they are
            return (width, height), None
        return (max(1, round(width * scale)), max(1, round(height * scale))), None
    if spec.exact_size is not None:
        box_w, box_h = spec.exact_size
        if not spec.crop:
            return (box_w, box_h), None
        scale = max(box_w / width, box_h / height)
        size = (max(box_w, round(width * scale)), max(box_h, round(height * scale)))
        left, top = (size[0] - box_w) // 2, (size[1] - box_h) // 2
        return size, (left, top, left + box_w, top + box_h)
    return (width, height), None


def _eight_bit(img: Image.Image) -> Image.Image:
    """``img`` with 16-bit grey levels scaled to 8 bits (0..65535 -> 0..255); other modes as
    they are. Why: Pillow's ``convert("RGB")`` of a 16-bit grey PNG (mode ``I;16``, or ``I``)
    clips every level above 255 to white, so such a picture was packed (and decoded for
    training) as a white image with a few dark pixels, without a word (packed43)."""
    if img.mode in _SIXTEEN_BIT or (img.mode == "I" and img.format == "PNG"):
        return img.convert("I").point(lambda v: v * (1 / 257) + 0.5).convert("L")
    return img


def _has_alpha(img: Image.Image) -> bool:
    return img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info)


def psnr(a: bytes, b: bytes) -> float:
    """Peak signal-to-noise ratio in dB between two encoded images of the same size (RGB)."""
    ia, ib = Image.open(io.BytesIO(a)).convert("RGB"), Image.open(io.BytesIO(b)).convert("RGB")
    if ia.size != ib.size:
        raise BadImage(f"cannot compare images of sizes {ia.size} and {ib.size}")
    sq = ImageStat.Stat(ImageChops.difference(ia, ib)).sum2
    mse = sum(sq) / (ia.width * ia.height * 3)
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def image_size(data: bytes) -> tuple[int, int]:
    """Width and height from the header of an encoded image."""
    return Image.open(io.BytesIO(data)).size


def synthetic_photo(width: int, height: int, seed: int, *, quality: int = 92, orientation: int = 1) -> bytes:
    """A deterministic photo-like JPEG (smooth shapes, texture, fine noise) for tests,
    benchmarks and the example; ``orientation`` writes that EXIF orientation tag."""
    from PIL import ImageDraw, ImageFilter

    rnd = _Lcg(seed)
    base = Image.merge(
        "RGB",
        [
            Image.linear_gradient("L").resize((width, height)).rotate(rnd.below(360)),
            Image.radial_gradient("L").resize((width, height)),
            Image.effect_mandelbrot(
                (max(1, width // 4), max(1, height // 4)), (-2 + rnd.unit(), -1.2, 1, 1.2 + rnd.unit()), 40
            ).resize((width, height), Image.Resampling.BILINEAR),
        ],
    )
    draw = ImageDraw.Draw(base)
    for _ in range(12):
        x, y = rnd.below(width), rnd.below(height)
        r = 4 + rnd.below(max(5, min(width, height) // 4))
        draw.ellipse((x - r, y - r, x + r, y + r), fill=(rnd.below(256), rnd.below(256), rnd.below(256)))
    noise = Image.effect_noise((width, height), 24).convert("RGB")
    img = Image.blend(base.filter(ImageFilter.GaussianBlur(1.2)), noise, 0.12)
    exif = Image.Exif()
    if orientation != 1:
        exif[_EXIF_ORIENTATION] = orientation
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality, exif=exif.tobytes())
    return buf.getvalue()


class _Lcg:
    """A tiny seeded generator so synthetic images are identical on every machine."""

    def __init__(self, seed: int) -> None:
        self.state = (seed * 6364136223846793005 + 1442695040888963407) % 2**64

    def below(self, n: int) -> int:
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % 2**64
        return (self.state >> 33) % n

    def unit(self) -> float:
        return self.below(1000) / 1000


def decode_rgb(
    data: bytes, size: tuple[int, int] | None = None, *, key: str = "", draft: bool = True
) -> tuple[int, int, bytes]:
    """Decode to packed RGB bytes (row-major HWC), optionally resized (bilinear) to ``size``.

    The training-time decode used by ``datahub.torch``: with ``draft`` JPEGs bigger than
    ``size`` are decoded in draft mode first, the same shortcut the pack step takes;
    ``draft=False`` is the plain full decode most training pipelines do.
    """
    try:
        img = Image.open(io.BytesIO(data))
        if draft and size is not None and img.format == "JPEG":
            img.draft("RGB", (math.ceil(size[0] * DRAFT_GAP), math.ceil(size[1] * DRAFT_GAP)))
        img = _eight_bit(img).convert("RGB")
        if size is not None and img.size != tuple(size):
            img = img.resize(tuple(size), Image.Resampling.BILINEAR)
    except Image.DecompressionBombError as exc:  # not an OSError: it escaped, naming no record
        raise ImageTooLarge(f"image {key!r} is too large to decode safely: {exc}", key=key) from exc
    except _DECODE_ERRORS as exc:
        raise BadImage(f"image {key!r} cannot be decoded ({type(exc).__name__}: {exc})", key=key) from exc
    return img.width, img.height, img.tobytes()
