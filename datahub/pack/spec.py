"""What a pack job does to each record: the transform and shard parameters, parsed once.

Plain data, so it travels in a job's metadata (JSON) to every worker and into the
packed version's lineage, and so the job id can be derived from it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from datahub.config import parse_size
from datahub.errors import InvalidInput

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
FORMATS = ("jpeg", "webp")
ROTATIONS = ("exif", "none", "90", "180", "270")
NON_IMAGE_POLICIES = ("copy", "skip")
CORRUPT_POLICIES = ("skip", "fail")
DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's own decompression-bomb threshold (~ 0.25 GiB of RGBA)

_SHORTER = re.compile(r"^shorter=(\d+)$")
_EXACT = re.compile(r"^(\d+)x(\d+)$")


@dataclass(frozen=True, slots=True)
class TransformSpec:
    """How every image is transformed. ``resize`` is "", "shorter=N" or "WxH"."""

    resize: str = ""
    crop: str = ""  # "" | "center" (only with WxH: cover the box, then cut its centre)
    rotate: str = "exif"  # apply EXIF orientation; or 90/180/270 counter-clockwise; or none
    format: str = "jpeg"
    quality: int = 90
    max_pixels: int = DEFAULT_MAX_PIXELS

    def __post_init__(self) -> None:
        if self.resize and not (_SHORTER.match(self.resize) or _EXACT.match(self.resize)):
            raise InvalidInput(f"invalid --resize {self.resize!r}: use shorter=256 or 224x224")
        if self.crop not in ("", "center"):
            raise InvalidInput(f"invalid --crop {self.crop!r}: the only crop is 'center'")
        if self.crop and not _EXACT.match(self.resize):
            raise InvalidInput("--crop center needs --resize WxH (e.g. --resize 224x224 --crop center)")
        if self.rotate not in ROTATIONS:
            raise InvalidInput(f"invalid --rotate {self.rotate!r}: use one of {', '.join(ROTATIONS)}")
        if self.format not in FORMATS:
            raise InvalidInput(f"invalid --format {self.format!r}: use one of {', '.join(FORMATS)}")
        if not 1 <= self.quality <= 100:
            raise InvalidInput(f"invalid --quality {self.quality}: use 1..100")
        if self.max_pixels < 1:
            raise InvalidInput(f"invalid max_pixels {self.max_pixels}: must be positive")
        if self.shorter == 0 or 0 in (self.exact_size or ()):
            raise InvalidInput(f"invalid --resize {self.resize!r}: sizes must be positive")

    @property
    def shorter(self) -> int | None:
        m = _SHORTER.match(self.resize)
        return int(m[1]) if m else None

    @property
    def exact_size(self) -> tuple[int, int] | None:
        m = _EXACT.match(self.resize)
        return (int(m[1]), int(m[2])) if m else None


@dataclass(frozen=True, slots=True)
class PackSpec:
    """A whole pack job: transform, shard size and the policies for odd records."""

    transform: TransformSpec
    shard_bytes: int = 256 * 1024**2  # source bytes per shard (one task = one shard)
    non_image: str = ""  # "copy" | "skip"; "" refuses a source that has non-image records
    on_corrupt: str = "skip"  # "skip" (reported by key) | "fail" (the job stops, naming the key)

    def __post_init__(self) -> None:
        if self.shard_bytes < 1:
            raise InvalidInput(f"invalid --shard-size {self.shard_bytes}: must be positive")
        if self.non_image not in ("", *NON_IMAGE_POLICIES):
            raise InvalidInput(f"invalid --non-image {self.non_image!r}: use copy or skip")
        if self.on_corrupt not in CORRUPT_POLICIES:
            raise InvalidInput(f"invalid --on-corrupt {self.on_corrupt!r}: use skip or fail")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PackSpec:
        return cls(
            TransformSpec(**data["transform"]),
            shard_bytes=data["shard_bytes"],
            non_image=data["non_image"],
            on_corrupt=data["on_corrupt"],
        )

    @classmethod
    def parse(
        cls,
        *,
        resize: str = "",
        crop: str = "",
        rotate: str = "exif",
        format: str = "jpeg",
        quality: int = 90,
        shard_size: str | int = "256MiB",
        non_image: str = "",
        on_corrupt: str = "skip",
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ) -> PackSpec:
        transform = TransformSpec(resize, crop, rotate, format.lower(), quality, max_pixels)
        return cls(transform, parse_size(shard_size), non_image, on_corrupt)


def is_image_key(key: str) -> bool:
    """Image records are recognised by their key's suffix (case-insensitive)."""
    return key.lower().endswith(IMAGE_SUFFIXES)
