"""The labeling workflow and who may do what; the HTTP layer and the CLI only call this.

Roles: an *admin* does everything; a *reviewer* sees every project and accepts or rejects
submitted items; an *annotator* sees only the projects they belong to and only their own
tasks (another annotator's task is 403, a project they are not in is 404).

Datasets: served by an authenticated datahub (``dataset_acl``), a LabelX account is the
datahub principal of its name, never a global admin, and the datasets' access lists hold:
making a project of a dataset (or a new dataset of a project) needs its reader role, and
committing labels onto it its writer role, as through the API. Otherwise a LabelX admin could
read and patch every dataset, whatever its access list says.

Item life cycle::

    todo ──save──> annotated ──submit task──> submitted ──review──> accepted
      └──skip──> skipped                          └──────────────> rejected ──save──> annotated ...
"""

from __future__ import annotations

import logging
import shlex
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datahub.api.access import Principal, require, require_creatable
from datahub.catalog.filter import RecordFilter
from datahub.catalog.model import Version
from datahub.errors import (
    AccessDenied,
    Conflict,
    DatahubError,
    DatasetNotFound,
    InvalidInput,
    NotFound,
    VersionNotFound,
)
from datahub.validation import check_name, check_prefix
from datahub.words import counted
from labelx.entities import Item, NewItem, Project, Task, User
from labelx.schema import LabelSchema, export_clash, parse_schema
from labelx.store import LabelStore

log = logging.getLogger(__name__)

MAX_TASK_SIZE = 1000
_READ_BATCH = 2000  # item keys (records) read per catalog request when migrating a project
EDITABLE = ("todo", "annotated", "skipped", "rejected")
# Why a picture is not shown (LabelService.picture_error), by the storage error's code, and what to do.
_NOT_SHOWN = {
    "object_changed": (
        "changed in storage after the project was made, so it is not shown; ask a LabelX admin to "
        "re-import the dataset and make a new project from the version that records the new picture"
    ),
    "object_not_found": "is gone from storage; ask a LabelX admin to check the dataset's objects",
    "payload_too_large": "is too large to preview; open it whole with size=original",
    "invalid_input": "is not an image LabelX can show; skip the item (S) or ask a LabelX admin",
}


def no_task_left(user: User, project: str, unfinished: list[tuple[int, int]]) -> str:
    """What "Take next task" says when every task has its annotator, with what ``user`` can do
    next: finish their own tasks (``unfinished``: number, items not yet submitted), review, or
    ask an admin. Why: it said only "every task has its annotator", in red, as if the press
    had failed (newuser74); it is the project's state, and the next step depends on the user."""
    said = f"no task left to take in {project}: every task has its annotator"
    if unfinished:
        mine = ", ".join(f"task {n} ({counted(left, 'item')} to go)" for n, left in unfinished[:3])
        return f"{said}. Yours to finish: {mine}"
    if user.is_admin:
        return f"{said}. Review the items they submit (the project's review queue), or assign a task to someone else in the Tasks list"
    if user.can_review:
        return f"{said}. Review the items they submit (the project's review queue), or ask an admin for more work"
    return f"{said}. Nothing waits for you here: ask an admin to assign you a task or to add a project"


class LabelService:
    def __init__(
        self,
        store: LabelStore,
        catalog: Any,
        *,
        clock: Callable[[], float] = time.time,
        dataset_acl: bool = False,
    ) -> None:
        """``dataset_acl``: check the datasets' access lists (the app under an authenticated
        datahub); off in local mode and for the CLI, whose catalog access is its own."""
        self.store, self.catalog, self.clock = store, catalog, clock
        self.dataset_acl = dataset_acl
        self._schemas: dict[int, LabelSchema] = {}

    # --- access --------------------------------------------------------------------------------
    def schema(self, project: Project) -> LabelSchema:
        if project.id not in self._schemas:
            self._schemas[project.id] = parse_schema(project.schema)
        return self._schemas[project.id]

    def project_for(self, user: User, project_id: int) -> Project:
        project = self.store.get_project(project_id)
        if not user.can_review and not self.store.is_member(project_id, user.id):
            raise NotFound(f"no project with id {project_id}", project=project_id)
        if not project.dataset_labels_read:
            self._read_dataset_labels(project)
        return project

    def _read_dataset_labels(self, project: Project) -> None:
        """Migrate a project of an old labelx.db, once: keep each item's label as its version
        has it, also one that is not a value of the schema (which that file did not keep, so
        the page showed no label and a commit replaced one nobody saw). A batch of records at a
        time; a version the catalog no longer has leaves the project as it was, to retry."""
        field = self.schema(project).field
        after = ""
        try:
            while True:
                keys = self.store.item_keys(project.id, after=after, limit=_READ_BATCH)
                records = (
                    self.catalog.store.get_records(project.dataset, project.version, keys) if keys else {}
                )
                labels = {k: records[k].labels.get(field) if k in records else None for k in keys}
                self.store.set_dataset_labels(project.id, labels, done=len(keys) < _READ_BATCH)
                if len(keys) < _READ_BATCH:
                    return
                after = keys[-1]
        except (DatasetNotFound, VersionNotFound):
            return
        except DatahubError as exc:  # a catalog that is down: the pages need only labelx.db
            log.warning(
                "labels of project %d (%s@v%d) not read from the catalog yet: %s; tried again at its next use",
                project.id, project.dataset, project.version, exc.message,
            )  # fmt: skip

    def _task_for(self, user: User, task_id: int, *, edit: bool = False) -> Task:
        task = self.store.get_task(task_id)
        try:
            project = self.project_for(user, task.project_id)
        except NotFound:
            # the answer of a missing task (the store's): "no project with id N" told a caller
            # outside the project that the task exists and which project holds it (review27)
            raise NotFound(f"no task with id {task_id}", task=task_id) from None
        if user.is_admin or task.assignee == user.id:
            return task
        if user.can_review and not edit:
            return task
        # Why it says what to do: the page said only "assigned to someone else" (leftovers25)
        own = f"open your own tasks from the project's page (Projects, then {project.name})"
        if task.assignee is None:
            raise AccessDenied(
                f"task {task_id} of {project.name} is not assigned to you: {own} and press "
                '"Take next task" there, or ask an admin to assign it to you',
                task=task_id,
            )
        raise AccessDenied(
            f"task {task_id} of {project.name} is assigned to {task.assignee_name}, and only its "
            f"annotator (or an admin) labels it: {own}, or ask an admin to assign it to you",
            task=task_id,
        )

    def item_for(self, user: User, item_id: int, *, edit: bool = False) -> Item:
        item = self.store.get_item(item_id)
        try:
            self._task_for(user, item.task_id, edit=edit)
        except NotFound:  # the answer of a missing item (the store's), as for a task above
            raise NotFound(f"no item with id {item_id}", item=item_id) from None
        return item

    def picture_error(self, item: Item, exc: DatahubError) -> DatahubError:
        """A storage error about ``item``'s picture as anyone shown the item may read it: the
        same code and status, naming the item's key and project. Why: storage messages name the
        record's URL (bucket and key, the server's path of a ``file://`` object) and an object's
        etag now, which an item never shows: its annotators and reviewers need not be able to
        read the dataset at all (docs/labelx.md)."""
        project = self.store.get_project(item.project_id)
        reason = _NOT_SHOWN.get(exc.code, f"could not be read from storage ({exc.code}); try again later")
        return type(exc)(
            f"the picture of {item.key!r} in project {project.name!r} ({project.dataset}@v{project.version}) "
            f"{reason}",
            item=item.id,
            key=item.key,
        )

    @staticmethod
    def require_admin(user: User) -> None:
        if not user.is_admin:
            raise AccessDenied("only an admin may do this")

    def require_account_maker(self, user: User, name: str) -> None:
        """Who may make an account through LabelX: its admins, while LabelX holds no access
        lists (local mode). Under an authenticated datahub an account is the datahub principal
        of its name, so making one grants that principal's roles on every dataset: a LabelX
        admin naming an account after a dataset's owner read and patched that dataset. There
        the server's operator makes accounts (the CLI, run where the catalog is)."""
        self.require_admin(user)
        if self.dataset_acl:
            raise AccessDenied(
                f"LabelX account {name!r} would be the datahub principal {name!r} and hold its roles on "
                "datasets, so under an authenticated datahub accounts are made by the server's operator: "
                f"`datahub --home {shlex.quote(str(Path(self.store.path).parent))} labelx create-user "
                f"{shlex.quote(name)} --role annotator` (or reviewer, admin) where the server runs: its "
                "home holds the labelx.db"
            )

    @staticmethod
    def require_reviewer(user: User) -> None:
        if not user.can_review:
            raise AccessDenied("only reviewers and admins review")

    def require_dataset(self, user: User, dataset: str, role: str) -> None:
        """The API's answer for ``user`` as a datahub principal: 404 as if missing without the
        reader role (its message also says how to grant one, alike for a missing dataset, so
        names still cannot be probed), 403 naming the role needed with less than ``role``."""
        if not self.dataset_acl:
            return
        try:
            require(Principal(user.name), self.catalog.get_dataset(dataset), role)
        except DatasetNotFound as exc:
            raise DatasetNotFound(
                f"{exc.message}; or LabelX user {user.name!r} may not read it: an admin of the "
                f"dataset grants it with `datahub dataset update {dataset} --grant {user.name}={role}`",
                dataset=dataset,
            ) from None

    def require_new_dataset(self, user: User, name: str) -> None:
        """The API's rule for a dataset ``user`` creates (a bucket snapshot's name is a global
        admin's, ``access.require_creatable``), which a LabelX account never is."""
        if self.dataset_acl:
            require_creatable(Principal(user.name), name)

    # --- projects ------------------------------------------------------------------------------
    def create_project(
        self,
        user: User,
        *,
        name: str,
        dataset: str,
        ref: str | int | None = None,
        prefix: str = "",
        where: str = "",
        schema: dict[str, Any],
        task_size: int = 50,
        annotators: list[str] | None = None,
        round_robin: bool = True,
    ) -> Project:
        """Snapshot the matching records of ``dataset@ref`` into items split into tasks.

        ``annotators`` become the project's members; with ``round_robin`` the tasks are
        assigned to them in turn, otherwise they take tasks one at a time (atomic claim).
        """
        self.require_admin(user)
        self.require_dataset(user, dataset, "reader")
        check_name(name, "project")
        check_prefix(prefix)
        parsed = parse_schema(schema)
        clash = export_clash(parsed)
        if clash is not None:
            raise InvalidInput(f"{clash}; rename it")
        if not 1 <= int(task_size) <= MAX_TASK_SIZE:
            raise InvalidInput(f"task size must be between 1 and {MAX_TASK_SIZE}")
        flt = RecordFilter.parse(where) if where else None
        named = annotators or []
        twice = sorted({n for n in named if named.count(n) > 1})
        if twice:  # 'alice, alice' made "Created … have no task" (no name) and counted 2 annotators
            raise InvalidInput(
                f"annotator(s) named more than once for project {name!r}: {', '.join(twice)}; "
                "name each annotator once (a typo for another name?)"
            )
        version = self.catalog.resolve(dataset, ref)
        if version.record_count == 0:
            raise self._empty_version(name, version)
        members = [self.store.user_by_name(n).id for n in named]
        records = self.catalog.list_records(dataset, version.seq, prefix=prefix, where=flt)
        items = (
            NewItem(
                r.key,
                r.url,
                r.etag,
                r.size,
                parsed.existing_value(dict(r.labels)),
                r.labels.get(parsed.field),
            )
            for r in records
        )
        return self.store.create_project(
            name=name,
            dataset=dataset,
            version=version.seq,
            prefix=prefix,
            filter=str(flt) if flt else "",
            schema=parsed.to_dict(),
            task_size=int(task_size),
            created_by=user.name,
            items=items,
            annotators=members,
            round_robin=round_robin,
        )

    def _empty_version(self, name: str, version: Version) -> InvalidInput:
        """Why a project on an empty version is refused, and what to do (newuser44).

        It said "no records of d@v2 match the prefix/filter" though none was given, and only
        how to list the version (which lists nothing): the version has no record to label, and
        what helps is adding records to the dataset, or choosing a version that holds some."""
        dataset = version.dataset
        held = next((v for v in self.catalog.log(dataset) if v.record_count and v.seq < version.seq), None)
        earlier = (
            f", or on v{held.seq}, which holds {counted(held.record_count, 'record')} (the Version field, "
            f"or --version {held.seq})"
            if held is not None
            else ""
        )
        return InvalidInput(
            f"project {name!r} would have nothing to label: {dataset}@v{version.seq} holds no records. "
            f"Add records to {dataset} with `datahub import SRC --to {dataset}` or "
            f"`datahub commit {dataset} --changes FILE.jsonl`, then create the project on the new version{earlier}",
            dataset=dataset,
            version=version.seq,
        )

    def projects_for(self, user: User) -> list[Project]:
        return self.store.list_projects(member=None if user.can_review else user.id)

    def tasks_for(self, user: User, project_id: int) -> list[dict[str, Any]]:
        self.project_for(user, project_id)
        return self.store.list_tasks(project_id, assignee=None if user.can_review else user.id)

    def take_next_task(self, user: User, project_id: int) -> int:
        """Claim the first unassigned task of a project (atomic: one winner per task). None
        left is ``NotFound`` with ``tasks_left=0``: the pages show it as information, not as a
        failure, with ``no_task_left``'s next step for this user."""
        project = self.project_for(user, project_id)
        while True:
            task_id = self.store.next_open_task(project_id)
            if task_id is None:
                said = no_task_left(user, project.name, self._unfinished(project_id, user))
                raise NotFound(said, project=project.name, tasks_left=0)
            if self.store.claim_task(task_id, user.id):
                return task_id

    def _unfinished(self, project_id: int, user: User) -> list[tuple[int, int]]:
        """``user``'s tasks of the project with items not yet sent for review: (number, count)."""
        done = ("submitted", "accepted")
        tasks = self.store.list_tasks(project_id, assignee=user.id)
        left = [(t["number"], t["total"] - sum(t["counts"].get(s, 0) for s in done)) for t in tasks]
        return [(n, k) for n, k in left if k]

    def assign(self, user: User, task_id: int, assignee: str | None) -> None:
        self.require_admin(user)
        task = self.store.get_task(task_id)
        uid = self.store.user_by_name(assignee).id if assignee else None
        if uid is not None:
            self.store.add_member(task.project_id, uid)
        self.store.assign_task(task_id, uid)

    # --- annotation ----------------------------------------------------------------------------
    def task_view(self, user: User, task_id: int) -> dict[str, Any]:
        task = self._task_for(user, task_id)
        project = self.store.get_project(task.project_id)
        return {
            "task": {"id": task.id, "number": task.number, "assignee": task.assignee_name},
            "project": project_json(project),
            "items": [item_json(i) for i in self.store.task_items(task_id)],
            "can_edit": user.is_admin or task.assignee == user.id,
        }

    def claim(self, user: User, item_id: int) -> Item:
        self.item_for(user, item_id, edit=True)
        return self.store.claim_item(item_id, user.id)

    def release(self, user: User, item_id: int) -> None:
        self.item_for(user, item_id)
        self.store.release_item(item_id, user.id)

    def save(self, user: User, item_id: int, version: int, value: Any, *, skip: bool = False) -> Item:
        """Autosave an annotation (or a skip); 409 if ``version`` is stale."""
        item = self.item_for(user, item_id, edit=True)
        if item.status not in EDITABLE:
            raise AccessDenied(
                f"item {item.key!r} is {item.status} and can no longer be edited here", item=item_id
            )
        project = self.store.get_project(item.project_id)
        value = None if skip else self.schema(project).check_value(value)
        # no value and no skip (e.g. an undo back to "unlabelled") puts the item back to do
        status = "skipped" if skip else ("todo" if value is None else "annotated")
        return self.store.save_value(item_id, user.id, version, value, status)

    def submit(self, user: User, task_id: int) -> dict[str, int]:
        self._task_for(user, task_id, edit=True)
        left = [i.key for i in self.store.task_items(task_id) if i.status in ("todo", "rejected")]
        if left:  # a well-formed request the task's state refuses: 409, not 400
            raise Conflict(
                f"task {task_id} still has {len(left)} item(s) to label (first: {left[0]!r}); "
                "label or skip them before submitting"
            )
        return {"submitted": self.store.submit_task(task_id)}

    # --- review --------------------------------------------------------------------------------
    def review_queue(self, user: User, project_id: int, limit: int = 200) -> list[dict[str, Any]]:
        self.require_reviewer(user)
        self.project_for(user, project_id)
        return [item_json(i) for i in self.store.items_by_status(project_id, ("submitted",), limit=limit)]

    def review(self, user: User, item_id: int, version: int, accept: bool, comment: str = "") -> Item:
        self.require_reviewer(user)
        item = self.item_for(user, item_id)
        if item.annotated_by == user.id and not user.is_admin:
            # a reviewer who took a task labelled, submitted and accepted it alone (caller44): a
            # review is another person's look; an admin runs the project (make run has no other)
            raise AccessDenied(
                f"item {item.key!r} was labelled by you ({user.name}): a review is another person's "
                "look at a label, so another reviewer or an admin reviews it",
                item=item_id,
            )
        if not accept and not comment.strip():
            raise InvalidInput(f"rejecting item {item.key!r} needs a comment telling the annotator why")
        return self.store.review(item_id, user.id, version, accept, comment.strip())

    # --- statistics ----------------------------------------------------------------------------
    def stats(self, user: User, project_id: int, hours: int = 24) -> dict[str, Any]:
        project = self.project_for(user, project_id)
        schema = self.schema(project)
        per_class: dict[str, Counter] = defaultdict(Counter)
        sugg: dict[str, Counter] = defaultdict(Counter)
        for value, suggestion, status in self.store.labelled_values(project_id):
            if status != "todo":
                for cls in schema.classes_of(value):
                    per_class[cls][status] += 1
            if suggestion is not None and status not in ("todo", "skipped"):
                accepted = suggestion.get("value") == value
                for cls in set(schema.classes_of(suggestion.get("value"))):
                    sugg[cls]["accepted" if accepted else "corrected"] += 1
        annot: dict[str, Counter] = defaultdict(Counter)
        for name, status, n in self.store.per_annotator(project_id):
            annot[name][status] += n
        now = self.clock()
        start = (int(now) // 3600 - hours + 1) * 3600
        hourly = dict(self.store.per_hour(project_id, start))
        return {
            "project": project_json(project),
            "counts": self.store.status_counts(project_id),
            "per_annotator": {k: dict(v) for k, v in annot.items()},
            "per_class": {c.name: dict(per_class.get(c.name, {})) for c in schema.classes},
            "per_hour": [
                {"hour": h, "items": hourly.get(h, 0)} for h in range(start, start + hours * 3600, 3600)
            ],
            "suggestions": {
                c: {**v, "rate": round(v["accepted"] / max(1, sum(v.values())), 3)} for c, v in sugg.items()
            },
            "exports": self.store.list_exports(project_id),
            "replaces_unfit": self.store.count_changed(project_id, unfit_only=True),
            "to_commit": self.store.count_changed(project_id),
        }


def project_json(p: Project) -> dict[str, Any]:
    return {
        "id": p.id,
        "name": p.name,
        "dataset": p.dataset,
        "version": p.version,
        "prefix": p.prefix,
        "filter": p.filter,
        "schema": p.schema,
        "task_size": p.task_size,
        "created_by": p.created_by,
        "created_at": p.created_at,
        "item_count": p.item_count,
    }


def item_json(i: Item) -> dict[str, Any]:
    return {
        "id": i.id,
        "task_id": i.task_id,
        "position": i.position,
        "key": i.key,
        "original": i.original,
        "dataset_label": i.dataset_label,
        "dataset_label_fits": i.dataset_label_fits,
        "value": i.value,
        "status": i.status,
        "version": i.version,
        "comment": i.comment,
        "suggestion": i.suggestion,
        "committed_in": i.exported_seq,  # the project dataset's version holding the label, or None
    }
