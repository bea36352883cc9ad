"""The binary layout of one packed sample (an LMDB value), version 1.

::

    offset  size  field
    0       4     magic  b"DHS1"
    4       1     kind   1 = image (re-encoded), 2 = raw (a non-image record copied as is)
    5       3     reserved, zero
    8       4     width  (u32, little-endian; 0 for raw)
    12      4     height (u32; 0 for raw)
    16      4     n = length of the JSON header (u32)
    20      n     JSON header, UTF-8: {"format", "labels", "meta", "source": {"url", "etag"}}
    20+n    rest  payload: the encoded image (JPEG/WebP) or the raw record bytes

Fixed fields first so a reader can get the size without parsing JSON; labels and
metadata are JSON because they are free-form in the catalog. Decoding slices a
memoryview, so the payload is not copied until the caller needs it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from datahub.errors import InvalidInput

MAGIC = b"DHS1"
KIND_IMAGE, KIND_RAW = 1, 2
_HEADER = struct.Struct("<4sB3xIII")


@dataclass(frozen=True, slots=True)
class Sample:
    key: str
    kind: int
    payload: bytes | memoryview
    format: str = ""  # "jpeg" | "webp" for images, "" for raw
    width: int = 0
    height: int = 0
    labels: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)
    source: Mapping[str, Any] = field(default_factory=dict)  # {"url", "etag"} of the source record


def encode_sample(sample: Sample) -> bytes:
    header = json.dumps(
        {
            "format": sample.format,
            "labels": dict(sample.labels),
            "meta": dict(sample.meta),
            "source": dict(sample.source),
        },
        separators=(",", ":"),
        sort_keys=True,
    ).encode()
    fixed = _HEADER.pack(MAGIC, sample.kind, sample.width, sample.height, len(header))
    return b"".join((fixed, header, sample.payload))


def decode_sample(key: str, value: bytes | memoryview) -> Sample:
    view = memoryview(value)
    if len(view) < _HEADER.size:
        raise InvalidInput(f"packed sample {key!r} is truncated ({len(view)} bytes)", key=key)
    magic, kind, width, height, n = _HEADER.unpack_from(view)
    if magic != MAGIC or kind not in (KIND_IMAGE, KIND_RAW):
        raise InvalidInput(f"packed sample {key!r} has an unknown layout (magic {magic!r})", key=key)
    start = _HEADER.size
    header = json.loads(bytes(view[start : start + n]))
    return Sample(
        key,
        kind,
        view[start + n :],
        header["format"],
        width,
        height,
        header["labels"],
        header["meta"],
        header["source"],
    )
