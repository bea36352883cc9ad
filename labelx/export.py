"""Accepted labels out of LabelX: a new dataset version through the catalog, or a download.

Committing is O(changes): only accepted items whose label differs from what the version
already held (and that were not exported before) become ``Patch`` changes, which the
catalog merges into the records' labels. The lineage names the project, its source
version and the label schema. The commit id is derived from the project and its export
count, so a retry after a crash returns the version already made instead of a second one.

Downloads: COCO JSON and YOLO txt (zip) for detection, CSV for classification (safe to open in
a spreadsheet; ``raw`` for the exact text). Box values
are fractions of the image size; COCO wants pixels, so its exporter reads image sizes.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
import zipfile
from collections.abc import Iterator
from pathlib import PurePosixPath
from tempfile import SpooledTemporaryFile
from typing import Any

from datahub.catalog.descriptions import copyable
from datahub.catalog.model import Patch, Put, Record
from datahub.errors import (
    AlreadyExists,
    CommitIdReused,
    Conflict,
    DatahubError,
    InvalidInput,
    RecordNotFound,
)
from datahub.storage.base import ObjectRef
from datahub.validation import check_name
from datahub.web.images import ImageSource
from labelx.entities import Item, Project, User
from labelx.schema import MULTI_JOIN, export_clash
from labelx.service import LabelService

SPOOL_BYTES = 8 * 1024**2  # downloads larger than this spill to a temp file


def lineage(project: Project, service: LabelService, changed: int) -> dict[str, Any]:
    schema = service.schema(project)
    return {
        "source": "labelx",
        "description": f"labels from LabelX project {project.name} ({schema.description})",
        "project": project.name,
        "project_id": project.id,
        "instance": service.store.instance,  # whose project_id: each labelx.db numbers from 1
        "from": f"{project.dataset}@v{project.version}",
        "schema": schema.to_dict(),
        "changed": changed,
    }


def commit_labels(
    service: LabelService,
    user: User,
    project_id: int,
    *,
    to_dataset: str | None = None,
    message: str = "",
    progress: Any = None,
    overwrite: bool = False,
) -> Any:
    """Write accepted labels as a new version; returns the catalog's Version.

    The labels patch the dataset's head. A record whose label changed at the head since the
    project's version (someone relabelled it; nobody here saw that label) refuses the commit
    (``Conflict``, nothing written) unless ``overwrite``: patched blindly, it was lost."""
    service.require_admin(user)
    project = service.store.get_project(project_id)
    if to_dataset == project.dataset:  # it made a new version of the source: not what was asked
        raise InvalidInput(
            f'{to_dataset!r} is project {project.name!r}\'s own dataset, and "Into dataset" (to_dataset, '
            "--to-dataset) makes a NEW dataset of the project's records; nothing was committed. To "
            f"commit the labels as a new version of {to_dataset}, leave it out: `datahub labelx commit "
            f'{shlex.quote(project.name)} --user {shlex.quote(user.name)}` (the dashboard: "Into '
            'dataset" empty); for a new dataset, name one that does not exist yet'
        )
    _refuse_unfinite_boxes(service, project, user)
    if to_dataset:
        service.require_dataset(user, project.dataset, "reader")
        service.require_new_dataset(user, check_name(to_dataset))
        return _commit_new_dataset(service, user, project, to_dataset, message, progress)
    service.require_dataset(user, project.dataset, "writer")
    field = service.schema(project).field
    crashed = _unrecorded_own_version(service, project)
    if crashed is not None:  # the retry of a commit that crashed before its bookkeeping
        service.store.record_export(
            project_id,
            project.dataset,
            crashed.seq,
            _already_in(service, project, crashed.seq, field),
            user.name,
        )
        return crashed
    total = service.store.count_changed(project_id)
    if total == 0:  # the request is fine; the project's state is not ready (409, like git's)
        raise Conflict(nothing_to_commit(service, project))
    _refuse_changed_pictures(service, project, field, user)  # ``overwrite`` is for labels, not pictures
    if not overwrite:
        _refuse_unseen_changes(service, project, field, user)
    held = _held_at_head(service, project, field)
    exported: list[tuple[int, int]] = []  # (item id, version): 16 bytes per change, not whole items

    def changes() -> Iterator[Patch]:
        for item in service.store.iter_items(project_id, ("accepted",), changed_only=True):
            exported.append((item.id, item.version))
            if progress is not None:
                progress.update()
            if item.id not in held:  # the head holds it already: the new version holds it too
                yield Patch(item.key, labels={field: item.value})

    n_exports = len(service.store.list_exports(project_id))
    try:
        version = service.catalog.commit(
            project.dataset,
            changes(),
            base=None,
            message=message or f"labels from LabelX project {project.name}",
            author=user.name,
            lineage=lineage(project, service, total - len(held)),
            commit_id=f"labelx-{service.store.instance}-{project.id}-export-{n_exports + 1}",
        )
    except CommitIdReused as exc:  # that export was committed, and labels were edited since
        version = service.catalog.resolve(project.dataset, int(exc.details["version"]))  # type: ignore[call-overload]
        exported = []
    except RecordNotFound as exc:  # the catalog's words are for a change set's author (newuser22)
        key, head = exc.details.get("key"), exc.details.get("version")
        raise RecordNotFound(
            f"record {key!r}, labelled in project {project.name!r} (from {project.dataset}@v{project.version}), "
            f"is no longer in {project.dataset}'s head (v{head}), so nothing was committed: commit the "
            "labels into a new dataset holding the project's records (the dashboard's \"Into dataset\", "
            f"`datahub labelx commit {project.name} --user {user.name} --to-dataset NAME`), "
            f"or make a new project from {project.dataset}@latest",
            dataset=project.dataset,
            key=key,
        ) from None
    if len(exported) < total:
        # the catalog already had this commit id (a retry after a crash between the catalog
        # commit and our bookkeeping) and did not consume ``changes``: mark exactly the items
        # whose label that version holds, so later edits stay pending
        exported = _already_in(service, project, version.seq, field)
    service.store.record_export(project_id, project.dataset, version.seq, exported, user.name)
    return version


UNSEEN_SHOWN = 5  # records named in the refusal; the count says how many in all


def _unrecorded_own_version(service: LabelService, project: Project) -> Any:
    """The project's newest version of its dataset if the project did not record it (a crash
    between the catalog's commit and ``record_export``), else None: the version a retry
    answers with, its labels marked exported, later edits left for the next commit. Why not
    only when it is the head (the commit id's replay): after another writer's commit the retry
    found the head holding the labels and recorded no export, so the next commit, of newly
    accepted labels, reused the crashed export's commit id, and the catalog answered with that
    old version: the new labels were not written and the commit said it had made it. Reads
    the versions after the project's own (newest first), never those before its snapshot."""
    recorded = {e["seq"] for e in service.store.list_exports(project.id) if e["dataset"] == project.dataset}
    instance = service.store.instance
    for v in service.catalog.log(project.dataset):  # newest first
        if v.seq <= project.version or v.seq in recorded:
            return None
        lin = v.lineage or {}
        if (lin.get("source"), lin.get("instance"), lin.get("project_id")) == (
            "labelx",
            instance,
            project.id,
        ):
            return v
    return None


def _held_at_head(service: LabelService, project: Project, field: str) -> set[int]:
    """The ids of the changed items whose accepted label the dataset's head already holds (a
    CLI relabel, another project, a commit over them). If that is every one, none is a change:
    they are marked held by the head and ``Conflict`` says so, nothing committed. Why: the
    commit patched each record with the label it had and made a version with no change, and
    the next commit found the same items to commit again. O(changes) reads, a batch at a time."""
    head = service.catalog.resolve(project.dataset, "latest")
    lin = head.lineage or {}
    recorded = {e["seq"] for e in service.store.list_exports(project.id) if e["dataset"] == project.dataset}
    if (
        lin.get("source") == "labelx"
        and lin.get("project_id") == project.id
        and lin.get("instance") == service.store.instance
        and head.seq not in recorded
    ):
        return set()  # this project's own commit, not recorded (a crash): its commit id returns it
    held: dict[int, tuple[int, str]] = {}  # id -> (item version, key)
    checked = 0
    for batch in _accepted_batches(service, project):
        checked += len(batch)
        now = service.catalog.store.get_records(project.dataset, head.seq, [i.key for i in batch])
        for item in batch:
            if item.key in now and _canonical(now[item.key].labels.get(field)) == _canonical(item.value):
                held[item.id] = (item.version, item.key)
    if held and len(held) == checked:
        service.store.mark_held([(i, v) for i, (v, _) in held.items()], head.seq)
        first = min(key for _, key in held.values())
        raise Conflict(
            f"{project.dataset}@v{head.seq} (its head) already holds every accepted label of project "
            f"{project.name!r} not yet committed ({len(held)}, first: {first!r}), so no version was made: "
            "they count as committed now. Accept more items in review to commit again"
        )
    return set(held)


def _refuse_unfinite_boxes(service: LabelService, project: Project, user: User) -> None:
    """Conflict, naming them, if the project held boxes of NaN or Infinity; they are sent back
    first (``LabelStore.send_back_nonfinite``), so the next commit writes the other labels. Why:
    such a box saved before they were refused (a labelx.db written by an older LabelX beside
    this one: opening the file sends back those it holds) failed the commit in the catalog, not
    JSON, naming no item, and every later commit of the project the same way."""
    sent = service.store.send_back_nonfinite(project.id)
    if not sent:
        return
    shown = "; ".join(f"{key}: {box}" for _, key, box in sent[:UNSEEN_SHOWN])
    more = f" (and {len(sent) - UNSEEN_SHOWN} more)" if len(sent) > UNSEEN_SHOWN else ""
    raise Conflict(
        f"project {project.name!r} held {len(sent)} box(es) with a coordinate that is not a number, "
        f"saved before LabelX refused them, which no dataset version can hold: {shown}{more}. Nothing "
        "was committed. Their images are sent back to annotation (status rejected), each box taken "
        "out, the other boxes kept, a comment naming it: redraw it there and accept it in review. "
        f"Commit again now for the project's other labels (`datahub labelx commit {shlex.quote(project.name)} "
        f"--user {shlex.quote(user.name)}`, or the dashboard's Commit)"
    )


def _refuse_changed_pictures(service: LabelService, project: Project, field: str, user: User) -> None:
    """Conflict, naming them, if an accepted label would go onto a record whose object (etag or
    size) at the dataset's head is not the one the project's version recorded, the picture the
    annotator saw. Why: the commit patches records at the head by key, so a picture replaced
    in a newer version took the label given to the old one: a wrong label for the bytes, which
    nobody in the project saw. ``overwrite`` does not lift it: it is for labels nobody saw, and
    no one ticking it for those means to label pictures nobody saw. A record whose head label
    is the accepted one already is not written (``_held_at_head``), and a deleted one is the
    commit's ``RecordNotFound``. O(changes): one read of the head's records per batch."""
    head = service.catalog.resolve(project.dataset, "latest")
    if head.seq == project.version:
        return
    changed: list[str] = []
    first = ""
    count = 0
    for batch in _accepted_batches(service, project):
        now = service.catalog.store.get_records(project.dataset, head.seq, [i.key for i in batch])
        for item in batch:
            rec = now.get(item.key)
            if rec is None or (rec.etag, rec.size) == (item.etag, item.size):
                continue
            if _canonical(rec.labels.get(field)) == _canonical(item.value):
                continue  # the head says this label already: nothing is written onto it
            count += 1
            first = first or item.key
            if len(changed) < UNSEEN_SHOWN:
                changed.append(f"{item.key} (item {item.id})")
    if not count:
        return
    more = f" (and {count - len(changed)} more)" if count > len(changed) else ""
    name, admin = shlex.quote(project.name), shlex.quote(user.name)
    raise Conflict(
        f"{count} accepted label(s) of project {project.name!r} were given to a picture that "
        f"{project.dataset}@v{head.seq} (its head) no longer holds: the record's object changed since "
        f"{project.dataset}@v{project.version}, the version the project labelled, so the label would "
        f"describe a picture nobody in the project saw: {'; '.join(changed)}{more}. Nothing was "
        "committed (overwrite does not apply: it is for labels, not pictures). Commit the labels with "
        'the pictures they were given to into a new dataset (the dashboard\'s "Into dataset", '
        f"`datahub labelx commit {name} --user {admin} --to-dataset NAME`), or take those items out "
        "(reject them: POST /api/items/<item>/review with accept false and a comment) and commit the "
        f"rest, labelling the new pictures in a new project made from {project.dataset}@v{head.seq}",
        dataset=project.dataset,
        key=first,
    )


def _refuse_unseen_changes(service: LabelService, project: Project, field: str, user: User) -> None:
    """Conflict if an accepted label would replace one committed at the head after the
    project's version by someone else: a label is seen if it is the version's, the accepted
    one, or the one at this project's newest commit into the dataset (its own labels).
    Reads those versions' records of the changed items, a batch at a time."""
    head = service.catalog.resolve(project.dataset, "latest")
    # this project's newest version of the dataset: one its exports recorded, or one whose
    # lineage names this labelx.db and project (a crash between the catalog commit and the
    # bookkeeping). The project id alone is another labelx.db's project too, whose labels
    # nobody here saw.
    recorded = {e["seq"] for e in service.store.list_exports(project.id) if e["dataset"] == project.dataset}
    instance = service.store.instance

    def ours(v: Any) -> bool:
        lin = v.lineage or {}
        mine = lin.get("source") == "labelx" and lin.get("project_id") == project.id
        return v.seq in recorded or (mine and lin.get("instance") == instance)

    seen_at = next((v.seq for v in service.catalog.log(project.dataset) if ours(v)), None)  # newest first
    if head.seq in (project.version, seen_at):
        return  # nobody committed since the snapshot or since this project's last commit
    unseen: list[str] = []
    count = 0
    for batch in _accepted_batches(service, project):
        keys = [i.key for i in batch]
        now = service.catalog.store.get_records(project.dataset, head.seq, keys)
        held = service.catalog.store.get_records(project.dataset, project.version, keys)
        ours = service.catalog.store.get_records(project.dataset, seen_at, keys) if seen_at else {}
        for item in batch:
            if item.key not in now:  # deleted at the head: the commit's RecordNotFound says so
                continue
            label = now[item.key].labels.get(field)
            # the raw labels, not the item's original (None when the version's label is not one
            # of the project's classes)
            before = held[item.key].labels.get(field) if item.key in held else None
            seen = [before, item.value, *([ours[item.key].labels.get(field)] if item.key in ours else [])]
            if _canonical(label) not in {_canonical(v) for v in seen}:
                count += 1
                if len(unseen) < UNSEEN_SHOWN:
                    unseen.append(f"{item.key}: {before!r} -> {label!r}")
    if count:
        more = f" (and {count - len(unseen)} more)" if count > len(unseen) else ""
        raise Conflict(
            f"{count} accepted label(s) of project {project.name!r} would replace a label changed at "
            f"{project.dataset}@v{head.seq} since the project's {project.dataset}@v{project.version}, "
            f"which nobody in the project saw: {'; '.join(unseen)}{more}. Review them in a new project "
            f"made from {project.dataset}@v{head.seq}, or commit over them on purpose "
            "(overwrite: true, the dashboard's 'Commit over' box, or "
            f"`datahub labelx commit {shlex.quote(project.name)} --user {shlex.quote(user.name)} --overwrite`)"
        )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _already_in(service: LabelService, project: Project, seq: int, field: str) -> list[tuple[int, int]]:
    """(id, version) of the accepted, changed items whose label version ``seq`` holds; one read
    of its records per batch (a key it does not hold is not there, never an error)."""
    found = []
    for batch in _accepted_batches(service, project):
        records = service.catalog.store.get_records(project.dataset, seq, [i.key for i in batch])
        for item in batch:
            if item.key in records and _canonical(records[item.key].labels.get(field)) == _canonical(
                item.value
            ):
                found.append((item.id, item.version))
    return found


def nothing_to_commit(service: LabelService, project: Project) -> str:
    """Why a commit of ``project`` found no label to write, and the step that gives it one.

    It said "no accepted, changed, not yet exported labels to commit; review items first"
    whatever the project's state: a project nobody had annotated was sent to a review with
    nothing in it, and "exported" (the commit's own bookkeeping) read as ``labelx export``,
    so an export seemed to have used the labels up (newuser32)."""
    counts = service.store.status_counts(project.id)
    source = f"{project.dataset}@v{project.version}"
    to_annotate = sum(counts.get(s, 0) for s in ("todo", "annotated", "rejected"))
    submitted, accepted, skipped = (counts.get(s, 0) for s in ("submitted", "accepted", "skipped"))
    where = [
        f"{n} {what}"
        for n, what in (
            (to_annotate, "still to annotate or submit"),
            (submitted, "waiting for review"),
            (skipped, "skipped"),
            (accepted, f"accepted, all committed already or labelled as {source} has them"),
        )
        if n
    ]
    if submitted:
        step = "accept items in review, then commit again"
    elif to_annotate:
        step = "annotate the items and submit their tasks, accept them in review, then commit again"
    else:
        step = "every accepted label is in the dataset already"
    return (
        f"project {project.name!r} has no accepted label left to commit (of its {sum(counts.values())} "
        f"items: {', '.join(where) or 'none'}); {step}"
    )


def _commit_new_dataset(
    service: LabelService, user: User, project: Project, name: str, message: str, progress: Any
) -> Any:
    """A new dataset holding the project's records, with accepted labels merged in."""
    # nothing accepted: the dataset would be a bare copy of the project's records (newuser27)
    if not service.store.status_counts(project.id).get("accepted"):
        raise Conflict(
            f"project {project.name!r} has no accepted label to commit into a new dataset {name!r}, so "
            "nothing was created: review items first (accept at least one), then commit again",
            dataset=name,
        )
    catalog, schema = service.catalog, service.schema(project)
    src = catalog.get_dataset(project.dataset)
    # the copy names no other dataset: its readers may not read the one an old pack target's
    # description named (datahub.catalog.descriptions)
    # of a source with no description it read "(labels from LabelX project P)", a parenthesis
    # of nothing on the datasets list and the dataset page (newuser74)
    said = f"labels from LabelX project {project.name}"
    description = f"{copyable(src.description)} ({said})".strip() if src.description.strip() else said
    commit_id = f"labelx-{service.store.instance}-{project.id}-to-{name}"
    made = _new_dataset(service, user, project, name, description)
    if made is not None:  # a crash after the catalog's commit, before the bookkeeping below
        service.store.record_export(project.id, name, made.seq, [], user.name)
        return made
    accepted = service.store.iter_items(project.id, ("accepted",))
    where = project.filter or None
    records = catalog.list_records(project.dataset, project.version, prefix=project.prefix, where=where)
    count = 0

    def changes() -> Iterator[Put]:
        nonlocal count
        nxt = next(accepted, None)
        for rec in records:
            while nxt is not None and nxt.key < rec.key:
                nxt = next(accepted, None)
            labels = dict(rec.labels)
            if nxt is not None and nxt.key == rec.key:
                labels[schema.field] = nxt.value
                count += 1
            if progress is not None:
                progress.update()
            yield Put(Record(rec.key, rec.url, rec.etag, rec.size, rec.checksum, rec.meta, labels))

    version = catalog.commit(
        name,
        changes(),
        base=None,
        message=message or f"labels from LabelX project {project.name}",
        author=user.name,
        lineage=lineage(project, service, count),
        commit_id=commit_id,
    )
    service.store.record_export(project.id, name, version.seq, [], user.name)
    return version


def _new_dataset(service: LabelService, user: User, project: Project, name: str, description: str) -> Any:
    """Create dataset ``name`` for a commit into a new dataset; None to commit into it, or the
    version an earlier run of this very commit made.

    Why a dataset that exists may do: the dataset is created before its first version is
    committed, so a commit stopped in between (Ctrl-C on the CLI's progress line, a crash, a
    catalog error) left it, empty, and the same commit again was refused "already exists; pick
    another name" (newuser29): the name was spent, and no command removes a dataset. It is
    this commit's own if it is exactly what this commit creates (owner, description, no access
    list, no source) and holds no version, or only one whose lineage names this labelx.db and
    project (each labelx.db numbers its projects from 1: the id alone is another's) that the
    project has not recorded (a crash between the two). Any other is
    refused as before: filling another's dataset would show the project's records to its
    readers."""
    catalog = service.catalog
    try:
        catalog.create_dataset(name, description=description, owner=user.name)
        return None
    except AlreadyExists:
        found = catalog.get_dataset(name)
        made_here = (user.name, description, {}, "")
        if (found.owner, found.description, dict(found.acl), found.source) != made_here:
            raise
        head = catalog.store.head(name)
        if head == 0:
            return None
        first = catalog.resolve(name, 1) if head == 1 else None
        lin = first.lineage if first is not None else {}
        recorded = any(e["dataset"] == name for e in service.store.list_exports(project.id))
        ours = ("labelx", service.store.instance, project.id)
        if not recorded and (lin.get("source"), lin.get("instance"), lin.get("project_id")) == ours:
            return first
        raise  # a commit this project made and recorded: another commit needs another name


# --- downloads ---------------------------------------------------------------------------------
def _items(service: LabelService, project: Project, include: str) -> Iterator[Item]:
    statuses = ("accepted",) if include == "accepted" else ("annotated", "submitted", "accepted")
    for item in service.store.iter_items(project.id, statuses):
        if item.value is not None:
            yield item


def exported_note(service: LabelService, project: Project, include: str) -> str:
    """What an export holds, said after "wrote FILE": an export of no label was a file with a
    header only and "wrote FILE", the same as a full one, before anything was accepted (newuser32)."""
    n = sum(1 for _ in _items(service, project, include))
    which = "accepted" if include == "accepted" else "annotated, in review or accepted"
    if n:
        return f"{n} label{'s' if n != 1 else ''} of project {project.name!r} ({which})"
    counts = service.store.status_counts(project.id)
    states = {"todo": "to annotate", "annotated": "annotated, not submitted", "submitted": "in review",
              "rejected": "rejected", "skipped": "skipped"}  # fmt: skip
    where = ", ".join(f"{counts[s]} {said}" for s, said in states.items() if counts.get(s))
    step = (
        "accept items in review, or add --include annotated for the labels not reviewed yet"
        if include == "accepted"
        else "annotate items first"
    )
    return (
        f"no label in it: no item of project {project.name!r} is {which} yet ({where or 'no items'}); {step}"
    )


# a cell starting with one of these is a formula to a spreadsheet (OWASP "CSV Injection"); the
# quote itself is in the list so the escape stays reversible: strip one leading quote, get the text
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def spreadsheet_cell(text: str) -> str:
    """``text`` with one ``'`` in front if a spreadsheet would read it as a formula. Why: keys and
    class names are any text the dataset's writers chose, and the CSV is opened in a spreadsheet
    (``=HYPERLINK(..)`` sends a click anywhere, DDE runs commands). A ``'`` in front says text."""
    return "'" + text if text.startswith(FORMULA_START) else text


def export_csv(
    service: LabelService, project: Project, include: str = "accepted", *, raw: bool = False
) -> SpooledTemporaryFile:
    """``key,<field>`` rows, spreadsheet-safe (``spreadsheet_cell``) unless ``raw``: a script
    that wants the exact keys asks for them (``?raw=1``, ``--raw``)."""
    schema = service.schema(project)
    if schema.kind != "classification":
        raise Conflict("CSV export is for classification projects; use COCO or YOLO for detection")
    clash = export_clash(schema, "csv")
    if clash is not None:  # a project made before the rule (``LabelService.create_project``)
        raise Conflict(
            f"CSV export of project {project.name!r}: its {clash}; the labels are whole in the dataset "
            f"once committed: `datahub labelx commit {shlex.quote(project.name)} --user ADMIN`, then "
            f"`datahub export {project.dataset} -o labels.jsonl`"
        )
    cell = (lambda text: text) if raw else spreadsheet_cell
    out = SpooledTemporaryFile(SPOOL_BYTES, mode="w+b")  # noqa: SIM115 - the caller streams and closes it
    text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
    writer = csv.writer(text)
    writer.writerow([cell("key"), cell(schema.field)])
    for item in _items(service, project, include):
        value = MULTI_JOIN.join(item.value) if isinstance(item.value, list) else item.value
        writer.writerow([cell(item.key), cell(value)])
    text.detach()
    out.seek(0)
    return out


def _require_detection(service: LabelService, project: Project, fmt: str) -> None:
    if service.schema(project).kind != "detection":
        # it named neither the project nor the format to give (newuser36)
        raise Conflict(
            f"project {project.name!r} is a classification project: {fmt} export is for detection "
            "projects; export it as CSV"
        )


def _px(value: float) -> float:
    """A COCO pixel quantity to 2 decimal places, unless that rounds a positive one to 0. Why:
    a box under 0.005 px wide came out 0 wide with area 0, a degenerate box that torchvision's
    detectors refuse at training; the label has a width (``LabelSchema`` keeps none of 0)."""
    return round(value, 2) or value


def export_coco(
    service: LabelService, project: Project, images: ImageSource, include: str = "accepted"
) -> SpooledTemporaryFile:
    _require_detection(service, project, "COCO")
    schema = service.schema(project)
    cat_ids = {c.name: n for n, c in enumerate(schema.classes, 1)}
    out = SpooledTemporaryFile(SPOOL_BYTES, mode="w+b")  # noqa: SIM115 - the caller streams and closes it
    imgs, anns = [], []
    for image_id, item in enumerate(_items(service, project, include), 1):
        try:
            w, h = images.size(ObjectRef(item.url, item.etag, item.size))
        except DatahubError as exc:
            raise service.picture_error(item, exc) from None
        imgs.append({"id": image_id, "file_name": item.key, "width": w, "height": h})
        for box in item.value:
            x, y, bw, bh = box["bbox"]
            px = [_px(x * w), _px(y * h), _px(bw * w), _px(bh * h)]
            anns.append({
                "id": len(anns) + 1, "image_id": image_id, "category_id": cat_ids[box["label"]],
                "bbox": px, "area": _px(px[2] * px[3]), "iscrowd": 0,
            })  # fmt: skip
    doc = {
        "info": {"description": f"LabelX project {project.name} ({project.dataset}@v{project.version})"},
        "images": imgs,
        "annotations": anns,
        "categories": [{"id": i, "name": n} for n, i in cat_ids.items()],
    }
    out.write(json.dumps(doc).encode())
    out.seek(0)
    return out


COLLISIONS_SHOWN = 5  # colliding key pairs named in the YOLO refusal; the count says how many in all

# in a zip member's name, what a reader may take for more than a character: ``\\`` a directory
# separator (Windows tools, and zip writers of Windows paths), ``:`` a drive letter or an NTFS
# stream, ``*?"<>|`` refused by Windows; ``%`` itself, so each name decodes to one key
_MEMBER_ESCAPE = re.compile(r'[%\\:*?"<>|]')
_TRAILING = re.compile(r"[. ]+$")  # Windows drops a name's trailing dots and spaces: ``x.`` is ``x``


def _escape(text: str) -> str:
    return "".join(f"%{b:02X}" for b in text.encode("utf-8", "surrogatepass"))


def yolo_member(key: str) -> str:
    """The zip member holding the YOLO labels of record ``key``: ``labels/`` + the key with its
    suffix replaced by ``.txt``, each ``/`` a directory, and in each segment ``%``, ``\\``, ``:``,
    ``*?"<>|`` and trailing dots or spaces percent-encoded (``a\\b.jpg`` -> ``labels/a%5Cb.txt``).

    Why: the member names were the keys as they are, and a key is any text but ``/``-separated
    segments of ``.`` or ``..``: ``x\\..\\..\\evil.jpg`` became ``labels/x\\..\\..\\evil.txt``,
    which a Windows unzip reads as two levels up, out of the target (zip slip), and ``C:/a.jpg``
    a drive. Encoded, every name is a plain relative path under ``labels/`` on every reader,
    and ``urllib.parse.unquote`` of it (less ``labels/`` and ``.txt``) is the key's stem."""
    stem = str(PurePosixPath(key).with_suffix(".txt"))
    segments = []
    for segment in stem.split("/"):
        segment = _MEMBER_ESCAPE.sub(lambda m: _escape(m.group()), segment)
        segments.append(_TRAILING.sub(lambda m: _escape(m.group()), segment))
    return "labels/" + "/".join(segments)


def export_yolo(service: LabelService, project: Project, include: str = "accepted") -> SpooledTemporaryFile:
    """A zip: ``classes.txt`` plus ``labels/<key stem>.txt`` lines ``class cx cy w h`` (0..1),
    each name made safe for any unzip by ``yolo_member``.

    YOLO pairs an image with the label file of the same path and stem, so two keys of one
    stem in one directory (``a/x.jpg``, ``a/x.png``) would share ``labels/a/x.txt``: one
    image's boxes would be served for both. No YOLO layout keeps both, so such an export is
    refused (``Conflict``), naming the keys; nothing is written."""
    _require_detection(service, project, "YOLO")
    schema = service.schema(project)
    clash = export_clash(schema, "yolo")
    if clash is not None:  # a project made before the rule (``LabelService.create_project``)
        raise Conflict(
            f"YOLO export of project {project.name!r}: its {clash}; export COCO, which names classes in JSON"
        )
    index = {c.name: n for n, c in enumerate(schema.classes)}
    out = SpooledTemporaryFile(SPOOL_BYTES, mode="w+b")  # noqa: SIM115 - the caller streams and closes it
    owner: dict[str, str] = {}  # label file -> the key it was written for (the zip holds its names too)
    collisions: list[str] = []
    count = 0
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("classes.txt", "".join(c.name + "\n" for c in schema.classes))
        for item in _items(service, project, include):
            name = yolo_member(item.key)
            if name in owner:
                count += 1
                if len(collisions) < COLLISIONS_SHOWN:
                    collisions.append(f"{owner[name]} and {item.key} -> {name}")
                continue
            owner[name] = item.key
            lines = []
            for box in item.value:
                x, y, w, h = box["bbox"]
                lines.append(f"{index[box['label']]} {x + w / 2:.6f} {y + h / 2:.6f} {w:.6f} {h:.6f}\n")
            zf.writestr(name, "".join(lines))
    if count:
        out.close()
        more = f" (and {count - len(collisions)} more)" if count > len(collisions) else ""
        raise Conflict(
            f"YOLO export of project {project.name!r}: {count} labelled image(s) share a label file with "
            f"another image of the same directory and stem, and YOLO would read one's boxes for both: "
            f"{'; '.join(collisions)}{more}. Give the images distinct stems in the dataset (a new "
            "version), or export COCO, which names each image by its whole key"
        )
    out.seek(0)
    return out


def _accepted_batches(service, project) -> Iterator[list[Item]]:
    """The project's accepted, changed items, 500 at a time: each batch is one read of the
    catalog's records for its keys, so the checks cost O(changes), never the project whole."""
    batch: list[Item] = []
    for item in service.store.iter_items(project.id, ("accepted",), changed_only=True):
        batch.append(item)
        if len(batch) >= 500:
            yield batch
            batch = []
    if batch:
        yield batch
