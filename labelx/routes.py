"""The JSON API (``/api/...``): one thin handler per operation over LabelService and export."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from datahub.errors import DatahubError
from datahub.storage.base import ObjectRef
from datahub.validation import check_name
from datahub.web.revalidate import private_answer, strong_etag
from labelx import export
from labelx.auth import hash_password
from labelx.deps import LX, RowId, Who
from labelx.models import (
    CommitLabels,
    Committed,
    ErrorBody,
    ItemOut,
    ItemReview,
    ItemSave,
    Matched,
    Ok,
    ProjectCreate,
    ProjectOut,
    Stats,
    Submitted,
    TaskAssign,
    TaskSummary,
    TaskTaken,
    TaskView,
    TokenCreate,
    TokenInfoOut,
    TokenOut,
    TokenRevoke,
    UserCreate,
    UserOut,
)
from labelx.preannotate import import_jsonl, text_lines
from labelx.service import item_json, project_json

router = APIRouter(prefix="/api")


@router.get("/me")
def me(who: Who) -> UserOut:
    return UserOut(name=who.user.name, role=who.user.role)


@router.get("/users")
def users(lx: LX, who: Who) -> list[UserOut]:
    lx.service.require_admin(who.user)
    return [UserOut(name=u.name, role=u.role) for u in lx.store.list_users()]


@router.post("/users", status_code=201)
def create_user(lx: LX, who: Who, body: UserCreate) -> UserOut:
    lx.service.require_account_maker(who.user, body.name)
    user = lx.store.create_user(check_name(body.name, "user"), body.role, hash_password(body.password))
    return UserOut(name=user.name, role=user.role)


@router.post(
    "/tokens",
    status_code=201,
    responses={429: {"model": ErrorBody, "description": "too many wrong passwords: wait Retry-After s"}},
)
def create_token(request: Request, lx: LX, who: Who, body: TokenCreate = TokenCreate()) -> TokenOut:
    address = request.client.host if request.client else None  # its password check is throttled
    return TokenOut(token=lx.auth.token_for(who, body.description, body.password, body.expires_days, address))


@router.get("/tokens")
def tokens(lx: LX, who: Who) -> list[TokenInfoOut]:
    """The caller's live tokens, every account's for an admin (the admin page lists them to
    revoke: it could only make them, newuser27); never a secret."""
    rows = lx.store.list_tokens(None if who.user.is_admin else who.user.id)
    return [TokenInfoOut(**row) for row in rows]


@router.post("/tokens/revoke")
def revoke_token(lx: LX, who: Who, body: TokenRevoke = TokenRevoke()) -> Ok:
    lx.auth.revoke_token(who.user, body.token, body.id)
    return Ok(ok=True)


@router.get("/projects")
def projects(lx: LX, who: Who) -> list[ProjectOut]:
    return [project_json(p) for p in lx.service.projects_for(who.user)]


@router.post("/projects", status_code=201)
def create_project(lx: LX, who: Who, body: ProjectCreate) -> ProjectOut:
    project = lx.service.create_project(
        who.user,
        name=body.name,
        dataset=body.dataset,
        ref=body.version,
        prefix=body.prefix or "",
        where=body.filter or "",
        schema=body.schema_.model_dump(exclude_none=True),
        task_size=body.task_size,
        annotators=list(body.annotators or []),
        round_robin=body.assign != "claim",
    )
    return project_json(project)


@router.get("/projects/{project_id}")
def project(lx: LX, who: Who, project_id: RowId) -> ProjectOut:
    return project_json(lx.service.project_for(who.user, project_id))


@router.get("/projects/{project_id}/tasks")
def tasks(lx: LX, who: Who, project_id: RowId) -> list[TaskSummary]:
    return lx.service.tasks_for(who.user, project_id)


@router.post("/projects/{project_id}/take-task")
def take_task(lx: LX, who: Who, project_id: RowId) -> TaskTaken:
    return TaskTaken(task_id=lx.service.take_next_task(who.user, project_id))


@router.get("/projects/{project_id}/stats")
def stats(lx: LX, who: Who, project_id: RowId) -> Stats:
    """The dashboard's figures, and why a commit would find nothing: the page disables its
    "Commit accepted labels" button with that reason, as the commit's 409 gives it (newuser33)."""
    out = lx.service.stats(who.user, project_id)
    if not out["to_commit"]:
        out["nothing_to_commit"] = export.nothing_to_commit(
            lx.service, lx.service.store.get_project(project_id)
        )
    return out


@router.get("/projects/{project_id}/review")
def review_queue(lx: LX, who: Who, project_id: RowId) -> list[ItemOut]:
    return lx.service.review_queue(who.user, project_id)


@router.post("/projects/{project_id}/commit")
def commit(lx: LX, who: Who, project_id: RowId, body: CommitLabels = CommitLabels()) -> Committed:
    version = export.commit_labels(
        lx.service,
        who.user,
        project_id,
        to_dataset=body.to_dataset or None,
        message=body.message or "",
        overwrite=body.overwrite,
    )
    return Committed(dataset=version.dataset, seq=version.seq, modified=version.modified)


@router.post("/projects/{project_id}/suggestions")
async def suggestions(request: Request, lx: LX, who: Who, project_id: RowId) -> Matched:
    lx.service.require_admin(who.user)
    body = await request.body()  # bounded before the route runs: api.max_body_bytes (create_labelx_app)

    def attach() -> int:  # SQLite work off the event loop; every line is checked before any is stored
        project = lx.store.get_project(project_id)
        lines = text_lines(body.splitlines())
        model = request.query_params.get("model")
        return import_jsonl(lx.store, project, lx.service.schema(project), lines, model).matched

    return Matched(matched=await run_in_threadpool(attach))


@router.get(
    "/projects/{project_id}/export/{fmt}",
    response_class=Response,
    responses={
        200: {
            "description": "the export file (attachment)",
            "content": {"text/csv": {}, "application/json": {}, "application/zip": {}},
        }
    },
)
def download(
    lx: LX,
    who: Who,
    project_id: RowId,
    fmt: Literal["csv", "coco", "yolo"],
    include: Literal["accepted", "annotated"] = "accepted",
    raw: Annotated[
        bool, Query(description="CSV: the exact keys and labels, not quoted for a spreadsheet")
    ] = False,
) -> Response:
    project = lx.service.project_for(who.user, project_id)
    if not who.user.can_review:
        lx.service.require_admin(who.user)
    makers = {
        "csv": (lambda: export.export_csv(lx.service, project, include, raw=raw), "text/csv", "csv"),
        "coco": (
            lambda: export.export_coco(lx.service, project, lx.images, include),
            "application/json",
            "json",
        ),
        "yolo": (lambda: export.export_yolo(lx.service, project, include), "application/zip", "zip"),
    }
    make, media, ext = makers[fmt]
    spool = make()
    filename = f"{project.name}-{fmt}.{ext}"

    def chunks() -> Any:
        with spool:
            while block := spool.read(256 * 1024):
                yield block

    return StreamingResponse(
        chunks(), media_type=media, headers={"Content-Disposition": f'attachment; filename="{filename}"'}
    )


@router.put("/tasks/{task_id}/assignee")
def assign(lx: LX, who: Who, task_id: RowId, body: TaskAssign = TaskAssign()) -> Ok:
    lx.service.assign(who.user, task_id, body.assignee or None)
    return Ok(ok=True)


@router.get("/tasks/{task_id}")
def task(lx: LX, who: Who, task_id: RowId) -> TaskView:
    view = lx.service.task_view(who.user, task_id)
    upcoming = [i for i in lx.store.task_items(task_id) if i.status in ("todo", "rejected")]
    lx.images.hint([ObjectRef(i.url, i.etag, i.size) for i in upcoming])  # fetched ahead by the cache
    return view


@router.post("/tasks/{task_id}/submit")
def submit(lx: LX, who: Who, task_id: RowId) -> Submitted:
    return lx.service.submit(who.user, task_id)


@router.post("/items/{item_id}/claim")
def claim(lx: LX, who: Who, item_id: RowId) -> ItemOut:
    return item_json(lx.service.claim(who.user, item_id))


@router.post("/items/{item_id}/release")
def release(lx: LX, who: Who, item_id: RowId) -> Ok:
    lx.service.release(who.user, item_id)
    return Ok(ok=True)


@router.put("/items/{item_id}")
def save(lx: LX, who: Who, item_id: RowId, body: ItemSave) -> ItemOut:
    item = lx.service.save(who.user, item_id, body.version, body.value, skip=body.skip)
    return item_json(item)


@router.post("/items/{item_id}/review")
def review(lx: LX, who: Who, item_id: RowId, body: ItemReview) -> ItemOut:
    item = lx.service.review(
        who.user,
        item_id,
        body.version,
        body.accept,
        body.comment or "",
    )
    return item_json(item)


@router.get(
    "/items/{item_id}/image",
    response_class=Response,
    responses={
        200: {
            "description": "a JPEG preview, or the original object's bytes for size=original",
            "content": {"image/jpeg": {}, "application/octet-stream": {}},
        }
    },
)
def image(
    request: Request,
    lx: LX,
    who: Who,
    item_id: RowId,
    size: Literal["thumb", "preview", "original"] = "preview",
) -> Response:
    item = lx.service.item_for(who.user, item_id)
    ref = ObjectRef(item.url, item.etag, item.size)

    def data() -> bytes:
        try:
            return lx.images.read(ref) if size == "original" else lx.images.preview(ref, size)
        except DatahubError as exc:
            raise lx.service.picture_error(item, exc) from None

    # the item's object (URL, record etag, size) and the size name the bytes: the browser may
    # keep them but asks again at each use, after the access check above (a day of max-age
    # showed a project's images after Sign out: caller74, datahub.web.revalidate)
    media = "application/octet-stream" if size == "original" else "image/jpeg"
    return private_answer(request, strong_etag(ref.url, ref.etag, ref.size, size), data, media)
