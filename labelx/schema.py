"""Label schemas and the one validator every annotation, suggestion and import goes through.

A schema says what a label *value* looks like, so the store, the API, the UI and the
exporters agree on one shape (kept in the record's labels under ``schema.field``):

- ``classification`` single-label: ``"cat"``
- ``classification`` multi-label:  ``["cat", "dog"]`` (sorted, no duplicates)
- ``detection``: ``[{"label": "cat", "bbox": [x, y, w, h]}, ...]`` with coordinates as
  fractions of the image width/height (0..1), so they do not depend on the preview size.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from datahub.errors import InvalidInput

KINDS = ("classification", "detection")
_COLOR = re.compile(r"#[0-9a-fA-F]{6}")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# 20 distinct colors: an 11th class repeated the 1st, and its boxes looked like the 1st's
PALETTE = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4",
           "#42d4f4", "#f032e6", "#9a6324", "#469990", "#808000",
           "#800000", "#000075", "#ffe119", "#bfef45", "#aaffc3",
           "#dcbeff", "#fabed4", "#ffd8b1", "#a9a9a9", "#000000")  # fmt: skip
MAX_BOXES = 500


@dataclass(frozen=True, slots=True)
class LabelClass:
    name: str
    color: str
    key: str  # shortcut key: "1".."9", "0", or a letter


@dataclass(frozen=True, slots=True)
class LabelSchema:
    kind: Literal["classification", "detection"]
    classes: tuple[LabelClass, ...]
    multi: bool = False  # classification only
    field: str = "class"  # the record-label field the value lives in

    @property
    def names(self) -> frozenset[str]:
        return frozenset(c.name for c in self.classes)

    # --- wire form ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "multi": self.multi,
            "field": self.field,
            "classes": [{"name": c.name, "color": c.color, "key": c.key} for c in self.classes],
        }

    @property
    def description(self) -> str:
        """A short human name used in lineage: ``detection(boxes: cat,dog)``."""
        kind = "multi-label classification" if self.multi else self.kind
        return f"{kind}({self.field}: {','.join(c.name for c in self.classes)})"

    # --- values ----------------------------------------------------------------------------------
    def check_value(self, value: Any) -> Any:
        """Return the normalised value, or raise InvalidInput saying what is wrong.

        ``None`` means "no label" and is always allowed (an item may be skipped).
        """
        if value is None:
            return None
        if self.kind == "classification" and not self.multi:
            if not isinstance(value, str) or value not in self.names:
                raise InvalidInput(f"label {value!r} is not one of the classes {sorted(self.names)}")
            return value
        if self.kind == "classification":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InvalidInput("a multi-label value must be a list of class names")
            unknown = set(value) - self.names
            if unknown:
                raise InvalidInput(f"labels {sorted(unknown)} are not among the classes {sorted(self.names)}")
            return sorted(set(value))
        if not isinstance(value, list) or len(value) > MAX_BOXES:
            raise InvalidInput(f"a detection value must be a list of at most {MAX_BOXES} boxes")
        return [self._check_box(b) for b in value]

    def _check_box(self, box: Any) -> dict[str, Any]:
        if not isinstance(box, dict) or box.get("label") not in self.names:
            raise InvalidInput(f"each box needs a 'label' among {sorted(self.names)} and a 'bbox'")
        bbox = box.get("bbox")
        if (
            not isinstance(bbox, list)
            or len(bbox) != 4
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bbox)
        ):
            raise InvalidInput("a bbox is [x, y, w, h] as fractions of the image size")
        x, y, w, h = (float(v) for v in bbox)
        # NaN passes every comparison below as False: Python's JSON reads it (and Infinity), so
        # a box of NaN was saved, accepted, written as NaN into the COCO file, and only the
        # catalog refused it at commit, naming no item anyone could fix
        if not all(map(math.isfinite, (x, y, w, h))) or w <= 0 or h <= 0:
            raise InvalidInput(f"bbox {bbox} must be 4 numbers: fractions 0..1 of the image, w and h > 0")
        if x < -1e-6 or y < -1e-6 or x + w > 1 + 1e-6 or y + h > 1 + 1e-6:
            raise InvalidInput(f"bbox {bbox} must lie inside the image (fractions 0..1, w and h > 0)")
        # checked as stored: rounded after the checks, a box 4e-7 wide was kept 0 wide (COCO
        # area 0, which torchvision's detectors refuse at training), and the tolerated sliver
        # outside the image as -0.0 or past 1; the sliver is cut off, a box of no area refused
        x, y = (round(min(max(v, 0.0), 1.0), 6) + 0.0 for v in (x, y))  # + 0.0: never -0.0
        w, h = round(min(w, 1.0 - x), 6), round(min(h, 1.0 - y), 6)
        if w <= 0 or h <= 0:
            raise InvalidInput(
                f"bbox {bbox} has no area once stored (6 decimal places of the image's size): "
                "w and h must be at least 0.000001 of the image; draw it larger or leave it out"
            )
        return {"label": box["label"], "bbox": [x, y, w, h]}

    def classes_of(self, value: Any) -> list[str]:
        """Class names a value mentions (for per-class statistics)."""
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        if self.kind == "classification":
            return list(value)
        return [b["label"] for b in value]

    def existing_value(self, labels: dict[str, Any]) -> Any:
        """The value already in a record's labels, if it fits this schema (else None)."""
        if self.field not in labels:
            return None
        try:
            return self.check_value(labels[self.field])
        except InvalidInput:
            return None


RESERVED_KEYS = frozenset("asunpdbz")  # the annotation page's own keys
# a class without a key of its own gets the one at its position: 1-9 and 0 (as before), then the
# letters the page leaves free; the form names classes only, and an 11th class had no key, so
# a project of more than 10 classes could not be made from it
AUTO_KEYS = "1234567890" + "".join(ch for ch in "abcdefghijklmnopqrstuvwxyz" if ch not in RESERVED_KEYS)


def _default_key(position: int, name: str, taken: set[str]) -> str:
    """The key at ``position`` in AUTO_KEYS, or the first one left when another class has it."""
    preferred = AUTO_KEYS[position : position + 1]
    free = [k for k in preferred + AUTO_KEYS if k not in taken]
    if not free:
        raise InvalidInput(
            f"class {name!r} gets no shortcut key: each class needs its own and there are "
            f"{len(AUTO_KEYS)} (1-9, 0 and the letters the annotation page does not use); "
            f"use at most {len(AUTO_KEYS)} classes"
        )
    return free[0]


MULTI_JOIN = ";"  # joins a multi-label value's classes in a CSV cell (labelx/export.py)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def export_clash(schema: LabelSchema, fmt: str = "") -> str | None:
    """Why a class of ``schema`` would not come out of the ``fmt`` export ("csv", "yolo"; ""
    any) as itself, naming it; None if every class does. Why: a multi-label CSV cell joins
    classes with ``MULTI_JOIN`` (classes 'a;b' and 'c' came out 'a;b;c', three labels), and
    YOLO's ``classes.txt`` is a class per line, boxes naming a class by its line (a class
    'a\\nb' before 'c' made every box of 'c' read as 'b'). New projects refuse such a class
    (``LabelService.create_project``); a project stored before the rule is refused that export."""
    for c in schema.classes:
        if fmt in ("", "yolo") and _CONTROL.search(c.name):
            return (
                f"class {c.name!r} holds a control character: a line break splits YOLO's classes.txt "
                "(a class per line) and shifts the number of every later class"
            )
        if fmt in ("", "csv") and schema.multi and MULTI_JOIN in c.name:
            return (
                f"class {c.name!r} holds {MULTI_JOIN!r}, which joins a multi-label value's classes in "
                "the CSV export: one could not tell it from two classes"
            )
    return None


def parse_schema(spec: dict[str, Any]) -> LabelSchema:
    """Build a schema from its wire form; classes may be plain names (colors/keys assigned)."""
    if not isinstance(spec, dict):
        raise InvalidInput("a label schema is an object with 'kind' and 'classes'")
    kind = spec.get("kind", "classification")
    if kind not in KINDS:
        raise InvalidInput(f"unknown label schema kind {kind!r}; use one of {', '.join(KINDS)}")
    raw = spec.get("classes") or []
    if not isinstance(raw, list) or not raw or len(raw) > 64:
        raise InvalidInput("a label schema needs 1 to 64 classes")
    explicit = {str(c["key"]).lower() for c in raw if isinstance(c, dict) and c.get("key")}
    used: set[str] = set()
    classes: list[LabelClass] = []
    for i, c in enumerate(raw):
        c = {"name": c} if isinstance(c, str) else c
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"].strip():
            raise InvalidInput(f"class #{i + 1} needs a non-empty 'name'")
        name = c["name"].strip()
        if len(name) > 64:
            raise InvalidInput(f"class name {name[:20]!r}... is longer than 64 characters")
        color = c.get("color") or PALETTE[i % len(PALETTE)]
        if not _COLOR.fullmatch(color):
            raise InvalidInput(f"color {color!r} of class {name!r} must look like #rrggbb")
        key = str(c["key"]) if c.get("key") else _default_key(i, name, explicit | used)
        if len(key) != 1 or not key.isalnum():
            raise InvalidInput(f"class {name!r} needs a single-character shortcut key (digit or letter)")
        used.add(key.lower())
        classes.append(LabelClass(name, color.lower(), key.lower()))
    twice = sorted({c.name for c in classes if [d.name for d in classes].count(c.name) > 1})
    if twice:  # it said only "class names must be unique", of a list of 20 (newuser36)
        raise InvalidInput(f"class names must be unique: {', '.join(map(repr, twice))} given more than once")
    if len({c.key for c in classes}) != len(classes):
        raise InvalidInput("shortcut keys must be unique")
    clash = {c.key for c in classes} & RESERVED_KEYS
    if clash:
        raise InvalidInput(
            f"shortcut keys {sorted(clash)} are reserved by the UI; use digits or other letters"
        )
    default_field = "boxes" if kind == "detection" else "class"
    fld = spec.get("field") or default_field
    if not isinstance(fld, str) or not _FIELD.fullmatch(fld):
        raise InvalidInput(f"invalid label field {fld!r}: use letters, digits and '_'")
    multi = bool(spec.get("multi", False))
    if multi and kind != "classification":
        raise InvalidInput("'multi' applies to classification schemas only")
    return LabelSchema(kind, tuple(classes), multi, fld)
