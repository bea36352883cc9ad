"""Pre-annotation: model predictions attached to items as suggestions (value, score, model).

Two sources, one shape. A JSON-lines file holds one prediction per line::

    {"key": "train/0001.jpg", "value": "cat", "score": 0.93, "model": "resnet50@v3"}

(``value`` in the project's schema shape, see labelx.schema). Or a torch model is run over
the project's images (``labelx.torch_model``; classification). Suggestions never change a
label by themselves: the annotator accepts one with a single key or corrects it, and the
dashboard counts how often each class's suggestion was accepted.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from datahub.errors import Cancelled, InvalidInput, ManifestError
from datahub.storage.base import ObjectRef
from datahub.validation import check_key
from datahub.web.images import ImageSource
from labelx.entities import Project
from labelx.schema import LabelSchema
from labelx.store import LabelStore

MAX_LINE = 1024 * 1024
# a model's input side and batch: a side of 0 was "a datahub bug" (PIL's ValueError), and a
# side of 100,000 would ask for a 120 GB tensor before anything failed (newuser17)
MAX_SIDE = 4096
MAX_BATCH = 4096


def suggestion(value: Any, score: float | None, model: str) -> dict[str, Any]:
    return {"value": value, "score": None if score is None else round(float(score), 4), "model": model}


def text_lines(raw: Iterable[bytes]) -> Iterator[str]:
    """Lines of bytes as text; a line that is not UTF-8 is refused by its number, as a bad
    JSON line is. Why: the CLI ended in "a datahub bug" (UnicodeDecodeError), and an upload
    replaced such bytes with U+FFFD, storing a model's name changed and dropping a key's line
    from the matches unsaid (newuser22). Nothing is imported then."""
    for n, line in enumerate(raw, 1):
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError(
                f"predictions line {n}: not UTF-8 text (byte {line[exc.start]:#04x} at column {exc.start + 1}); "
                "a predictions file is JSON lines in UTF-8; nothing was imported",
                line=n,
            ) from None


def parse_jsonl(
    lines: Iterable[str], schema: LabelSchema, model: str | None = None
) -> Iterator[tuple[str, dict]]:
    """Yield (key, suggestion) per line; ManifestError names the first bad line."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            if len(line) > MAX_LINE:
                raise ValueError(f"line longer than {MAX_LINE} bytes")
            try:
                row = json.loads(line)
            except json.JSONDecodeError as bad:  # it said "Expecting value: line 1 column 1 (char 0)"
                raise ValueError(
                    f"not JSON ({bad.msg} at column {bad.colno}): each line is one JSON object, "
                    '{"key": KEY, "value": LABEL, "score": 0.9, "model": NAME}'
                ) from None
            if not isinstance(row, dict):
                raise ValueError("each line must be a JSON object")
            key = check_key(row.get("key"))
            value = schema.check_value(row.get("value"))
            score = row.get("score")
            if score is not None and (
                isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score)
            ):  # NaN and Infinity: JSON to Python's reader, not to anyone else's
                raise ValueError(f"'score' must be a number, not {score!r}")
            name = str(row.get("model") or model or "unknown")
        except Exception as exc:  # any bad line becomes one clear error
            msg = getattr(exc, "message", None) or str(exc)
            raise ManifestError(f"predictions line {n}: {msg}; nothing was imported", line=n) from exc
        yield key, suggestion(value, score, name)


class Imported(NamedTuple):
    matched: int  # items that got a suggestion
    unmatched: list[str]  # the file's keys no item of the project has, in the file's order


def import_jsonl(
    store: LabelStore, project: Project, schema: LabelSchema, lines: Iterable[str], model: str | None = None
) -> Imported:
    """Validate every line first, then attach all suggestions in one transaction.

    A file none of whose keys is an item's is refused, saying what a key is here: it answered
    "0 items got a suggestion" (dashboard) or "suggestions 0" (CLI) and nothing more, to keys
    written relative to a folder (``0001.jpg`` for ``val/cat/0001.jpg``) or of another version
    (newuser29). Some keys unmatched is the caller's to say (``unmatched``): predictions made
    over a whole dataset for a project of part of it are normal."""
    rows = list(parse_jsonl(lines, schema, model))
    unmatched = store.missing_keys(project.id, (key for key, _ in rows))
    if rows and len(unmatched) == len({key for key, _ in rows}):
        example = store.item_keys(project.id, after="", limit=1)
        raise InvalidInput(
            f"none of the {len(rows)} predictions names an item of project {project.name!r} "
            f"({project.dataset}@v{project.version}): the first names {unmatched[0]!r}, and a "
            f"prediction's key is its record's whole key in the dataset, as {example[0]!r}; nothing "
            "was imported",
            project=project.name,
        )
    return Imported(store.set_suggestions(project.id, rows), unmatched)


def run_model(
    store: LabelStore,
    project: Project,
    schema: LabelSchema,
    images: ImageSource,
    model_spec: str,
    *,
    model_version: str = "",
    batch_size: int = 16,
    side: int = 224,
    progress: Any = None,
    cancel: threading.Event | None = None,
    only_missing: bool = True,
) -> int:
    """Run a classifier over the project's images and store its top class as suggestions.

    Work is committed per batch, and items that already have a suggestion are skipped
    (``only_missing``), so an interrupted run resumes where it stopped.
    """
    from labelx.torch_model import load_classifier  # torch is imported there only

    if not 1 <= side <= MAX_SIDE:
        raise InvalidInput(f"invalid --side {side}: use 1..{MAX_SIDE} pixels (the model's input, e.g. 224)")
    if not 1 <= batch_size <= MAX_BATCH:
        raise InvalidInput(f"invalid --batch-size {batch_size}: use 1..{MAX_BATCH} images (e.g. 16)")

    if schema.kind != "classification":
        raise ManifestError(
            "model pre-annotation supports classification projects; import detection predictions "
            f"as JSON lines (`datahub labelx preannotate {project.name} --predictions preds.jsonl`)"
        )
    classify = load_classifier(model_spec, len(schema.classes))
    name = model_version or model_spec
    names = [c.name for c in schema.classes]
    done = 0
    batch: list[tuple[str, ObjectRef]] = []

    def flush() -> int:
        pixels = [images.rgb(ref, side) for _, ref in batch]
        results = classify(pixels, side)
        rows = []
        for (key, _), (idx, score) in zip(batch, results, strict=True):
            value = [names[idx]] if schema.multi else names[idx]
            rows.append((key, suggestion(value, score, name)))
        n = store.set_suggestions(project.id, rows)
        if progress is not None:
            progress.update(len(batch))
        batch.clear()
        return n

    for item in store.iter_items(project.id):
        if cancel is not None and cancel.is_set():
            raise Cancelled(f"pre-annotation of project {project.name!r} interrupted; rerun to resume")
        if only_missing and item.suggestion is not None:
            if progress is not None:
                progress.update()
            continue
        batch.append((item.key, ObjectRef(item.url, item.etag, item.size)))
        if len(batch) >= batch_size:
            done += flush()
    if batch:
        done += flush()
    return done
