"""``create_labelx_app``: the LabelX FastAPI app (JSON API + browser pages + static files).

Runs alone (``datahub labelx serve``) or mounted beside the datahub API under ``/labelx``;
every URL the pages and scripts build starts from the ASGI ``root_path``, so both work.
The HTTP layer is thin: it authenticates, checks CSRF on state-changing requests, calls
``LabelService`` / the exporters, and maps DatahubError to its HTTP status exactly once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from html import escape
from pathlib import Path
from string import Template
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles

from datahub.config import Config
from datahub.errors import DatahubError, InvalidInput, PayloadTooLarge, Unauthenticated
from datahub.storage.base import ObjectRef
from labelx import export
from labelx.auth import (
    CSRF_HEADER,
    LOGIN_CSRF_COOKIE,
    SESSION_COOKIE,
    SESSION_TTL,
    Auth,
    Principal,
    check_csrf,
    hash_password,
)
from labelx.images import ImageSource
from labelx.preannotate import parse_jsonl
from labelx.service import LabelService, item_json, project_json
from labelx.store import LabelStore

HERE = Path(__file__).parent
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; "
    "frame-ancestors 'none'; form-action 'self'"
)


def labelx_db_path(config: Config) -> Path:
    """One place decides where LabelX keeps its state: ``<home>/labelx.db``."""
    return config.home_path / "labelx.db"


class LabelX:
    """Everything one app instance holds; built once, reached through ``request.app.state``."""

    def __init__(self, config: Config, catalog: Any, stores: Any, cache: Any, secure_cookies: bool) -> None:
        self.config = config
        self.store = LabelStore(labelx_db_path(config))
        self.service = LabelService(self.store, catalog)
        self.auth = Auth(self.store)
        self.images = ImageSource(config.home_path / "labelx" / "previews", cache=cache, stores=stores)
        self.secure_cookies = secure_cookies
        self.max_body = config.api.max_body_bytes


def _lx(request: Request) -> LabelX:
    return request.app.state.labelx


def _principal(request: Request) -> Principal:
    lx = _lx(request)
    principal = lx.auth.from_bearer(request.headers.get("authorization")) or lx.auth.from_session(
        request.cookies.get(SESSION_COOKIE)
    )
    if principal is None:
        raise Unauthenticated("log in first (or send an API token as 'Authorization: Bearer ...')")
    if request.method not in SAFE_METHODS:
        check_csrf(principal, request.headers.get(CSRF_HEADER))
    return principal


LX = Annotated[LabelX, Depends(_lx)]
Who = Annotated[Principal, Depends(_principal)]


async def _json_body(request: Request) -> dict[str, Any]:
    lx = _lx(request)
    body = await request.body()
    if len(body) > lx.max_body:
        raise PayloadTooLarge(f"request body is larger than {lx.max_body} bytes")
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise InvalidInput(f"request body is not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise InvalidInput("request body must be a JSON object")
    return data


Body = Annotated[dict[str, Any], Depends(_json_body)]


def _int(data: dict[str, Any], name: str) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"field {name!r} must be an integer")
    return value


def create_labelx_app(
    config: Config,
    *,
    catalog: Any = None,
    stores: Any = None,
    cache: Any = None,
    secure_cookies: bool = False,
) -> FastAPI:
    """Build the app. Services not given are opened from ``config`` and closed on shutdown.

    ``secure_cookies=True`` marks cookies Secure even when the app itself sees plain http
    (behind a TLS-terminating proxy); over https they are Secure anyway.
    """
    owned: list[Any] = []
    if catalog is None:
        from datahub.catalog import open_catalog

        catalog = open_catalog(config.resolved_catalog_url)
        owned.append(catalog)
    if stores is None:
        from datahub.storage import StoreRegistry

        stores = StoreRegistry(config)
        owned.append(stores)
    if cache is None:  # images are served through the datahub cache (RAM -> disk -> origin)
        from datahub.cache import open_cache

        cache = open_cache(config, stores)
        owned.insert(0, cache)
    lx = LabelX(config, catalog, stores, cache, secure_cookies)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        lx.store.close()
        for obj in owned:  # the cache before the stores it reads through
            obj.close()

    app = FastAPI(title="LabelX", lifespan=lifespan, docs_url="/api/docs", openapi_url="/api/openapi.json")
    app.state.labelx = lx
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.exception_handler(DatahubError)
    async def _error(request: Request, exc: DatahubError) -> Response:
        wants_page = request.method == "GET" and "text/html" in request.headers.get("accept", "")
        if isinstance(exc, Unauthenticated) and wants_page:
            return RedirectResponse(_base(request) + "/login", status_code=303)
        return JSONResponse({"error": exc.to_dict()}, status_code=exc.http_status)

    @app.middleware("http")
    async def _headers(request: Request, call_next: Any) -> Response:
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > lx.max_body:
            err = PayloadTooLarge(f"request body is larger than {lx.max_body} bytes")
            return JSONResponse({"error": err.to_dict()}, status_code=err.http_status)
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    _pages(app)
    _api(app)
    return app


# --- pages -----------------------------------------------------------------------------------------
def _base(request: Request) -> str:
    return request.scope.get("root_path", "").rstrip("/")


def _secure(request: Request) -> bool:
    return _lx(request).secure_cookies or request.url.scheme == "https"


def _render(name: str, request: Request, boot: Any = None, **values: Any) -> HTMLResponse:
    """Fill a page template: HTML-escaped ``$values`` and a JSON ``$boot`` block for its script."""
    text = (HERE / "templates" / name).read_text()
    data = json.dumps(boot or {}).replace("<", "\\u003c")
    out = Template(text).safe_substitute(
        base=escape(_base(request)), boot=data, **{k: escape(str(v)) for k, v in values.items()}
    )
    return HTMLResponse(out)


def _page(template: str, title: str, request: Request, who: Principal, **boot: Any) -> HTMLResponse:
    user = {"name": who.user.name, "role": who.user.role}
    data = {"base": _base(request), "csrf": who.csrf or "", "user": user, **boot}
    return _render(template, request, title=title, user=who.user.name, role=who.user.role, boot=data)


def _pages(app: FastAPI) -> None:
    import secrets

    @app.get("/login", response_class=HTMLResponse)
    def login_page(request: Request, error: str = "") -> HTMLResponse:
        token = secrets.token_urlsafe(24)
        resp = _render("login.html", request, csrf=token, error=error)
        resp.set_cookie(
            LOGIN_CSRF_COOKIE, token, httponly=True, samesite="strict", secure=_secure(request), path="/"
        )
        return resp

    @app.post("/login")
    def login(
        request: Request,
        lx: LX,
        name: Annotated[str, Form()],
        password: Annotated[str, Form()],
        csrf: Annotated[str, Form()],
    ) -> Response:
        cookie = request.cookies.get(LOGIN_CSRF_COOKIE)
        if not cookie or not secrets.compare_digest(cookie, csrf):
            return RedirectResponse(_base(request) + "/login?error=expired", status_code=303)
        try:
            session_id, _ = lx.auth.login(name, password)
        except Unauthenticated:
            return RedirectResponse(_base(request) + "/login?error=wrong", status_code=303)
        resp = RedirectResponse(_base(request) + "/", status_code=303)
        resp.set_cookie(
            SESSION_COOKIE,
            session_id,
            max_age=int(SESSION_TTL),
            httponly=True,
            samesite="strict",
            secure=_secure(request),
            path="/",
        )
        resp.delete_cookie(LOGIN_CSRF_COOKIE, path="/")
        return resp

    @app.post("/logout")
    def logout(request: Request, lx: LX, who: Who) -> Response:
        lx.auth.logout(request.cookies.get(SESSION_COOKIE, ""))
        resp = JSONResponse({"ok": True})
        resp.delete_cookie(SESSION_COOKIE, path="/")
        return resp

    @app.get("/", response_class=HTMLResponse)
    def home(request: Request, who: Who) -> HTMLResponse:
        return _page("home.html", "Projects", request, who)

    @app.get("/projects/{project_id}", response_class=HTMLResponse)
    def dashboard(request: Request, lx: LX, who: Who, project_id: int) -> HTMLResponse:
        project = lx.service.project_for(who.user, project_id)
        return _page("dashboard.html", project.name, request, who, project=project_json(project))

    @app.get("/projects/{project_id}/review", response_class=HTMLResponse)
    def review_page(request: Request, lx: LX, who: Who, project_id: int) -> HTMLResponse:
        project = lx.service.project_for(who.user, project_id)
        return _page("review.html", f"Review {project.name}", request, who, project=project_json(project))

    @app.get("/tasks/{task_id}", response_class=HTMLResponse)
    def annotate_page(request: Request, lx: LX, who: Who, task_id: int) -> HTMLResponse:
        view = lx.service.task_view(who.user, task_id)
        return _page("annotate.html", view["project"]["name"], request, who, task_id=task_id)

    @app.get("/admin", response_class=HTMLResponse)
    def admin_page(request: Request, lx: LX, who: Who) -> HTMLResponse:
        lx.service.require_admin(who.user)
        return _page("admin.html", "Admin", request, who)


# --- JSON API ----------------------------------------------------------------------------------
def _api(app: FastAPI) -> None:
    @app.get("/api/me")
    def me(who: Who) -> dict[str, Any]:
        return {"name": who.user.name, "role": who.user.role}

    @app.get("/api/users")
    def users(lx: LX, who: Who) -> list[dict[str, Any]]:
        lx.service.require_admin(who.user)
        return [{"name": u.name, "role": u.role} for u in lx.store.list_users()]

    @app.post("/api/users", status_code=201)
    def create_user(lx: LX, who: Who, body: Body) -> dict[str, Any]:
        lx.service.require_admin(who.user)
        from datahub.validation import check_name

        user = lx.store.create_user(
            check_name(str(body.get("name", "")), "user"),
            str(body.get("role", "annotator")),
            hash_password(str(body.get("password", ""))),
        )
        return {"name": user.name, "role": user.role}

    @app.post("/api/tokens", status_code=201)
    def create_token(lx: LX, who: Who, body: Body) -> dict[str, Any]:
        return {"token": lx.auth.new_token(who.user, str(body.get("description", "")))}

    @app.get("/api/projects")
    def projects(lx: LX, who: Who) -> list[dict[str, Any]]:
        return [project_json(p) for p in lx.service.projects_for(who.user)]

    @app.post("/api/projects", status_code=201)
    def create_project(lx: LX, who: Who, body: Body) -> dict[str, Any]:
        project = lx.service.create_project(
            who.user,
            name=str(body.get("name", "")),
            dataset=str(body.get("dataset", "")),
            ref=body.get("version"),
            prefix=str(body.get("prefix") or ""),
            where=str(body.get("filter") or ""),
            schema=body.get("schema") or {},
            task_size=_int({"task_size": body.get("task_size", 50)}, "task_size"),
            annotators=list(body.get("annotators") or []),
        )
        return project_json(project)

    @app.get("/api/projects/{project_id}")
    def project(lx: LX, who: Who, project_id: int) -> dict[str, Any]:
        return project_json(lx.service.project_for(who.user, project_id))

    @app.get("/api/projects/{project_id}/tasks")
    def tasks(lx: LX, who: Who, project_id: int) -> list[dict[str, Any]]:
        return lx.service.tasks_for(who.user, project_id)

    @app.post("/api/projects/{project_id}/take-task")
    def take_task(lx: LX, who: Who, project_id: int) -> dict[str, Any]:
        return {"task_id": lx.service.take_next_task(who.user, project_id)}

    @app.get("/api/projects/{project_id}/stats")
    def stats(lx: LX, who: Who, project_id: int) -> dict[str, Any]:
        return lx.service.stats(who.user, project_id)

    @app.get("/api/projects/{project_id}/review")
    def review_queue(lx: LX, who: Who, project_id: int) -> list[dict[str, Any]]:
        return lx.service.review_queue(who.user, project_id)

    @app.post("/api/projects/{project_id}/commit")
    def commit(lx: LX, who: Who, project_id: int, body: Body) -> dict[str, Any]:
        version = export.commit_labels(
            lx.service,
            who.user,
            project_id,
            to_dataset=body.get("to_dataset") or None,
            message=str(body.get("message") or ""),
        )
        return {"dataset": version.dataset, "seq": version.seq, "modified": version.modified}

    @app.post("/api/projects/{project_id}/suggestions")
    async def suggestions(request: Request, lx: LX, who: Who, project_id: int) -> dict[str, Any]:
        lx.service.require_admin(who.user)
        body = await request.body()
        if len(body) > lx.max_body:
            raise PayloadTooLarge(f"suggestions file is larger than {lx.max_body} bytes")
        project = lx.store.get_project(project_id)
        schema = lx.service.schema(project)
        rows = parse_jsonl(
            body.decode("utf-8", "replace").splitlines(), schema, request.query_params.get("model")
        )
        return {"matched": lx.store.set_suggestions(project_id, rows)}

    @app.get("/api/projects/{project_id}/export/{fmt}")
    def download(lx: LX, who: Who, project_id: int, fmt: str, include: str = "accepted") -> Response:
        project = lx.service.project_for(who.user, project_id)
        if not who.user.can_review:
            lx.service.require_admin(who.user)
        if include not in ("accepted", "annotated"):
            raise InvalidInput("include must be 'accepted' or 'annotated'")
        makers = {
            "csv": (lambda: export.export_csv(lx.service, project, include), "text/csv", "csv"),
            "coco": (
                lambda: export.export_coco(lx.service, project, lx.images, include),
                "application/json",
                "json",
            ),
            "yolo": (lambda: export.export_yolo(lx.service, project, include), "application/zip", "zip"),
        }
        if fmt not in makers:
            raise InvalidInput(f"unknown export format {fmt!r}; use csv, coco or yolo")
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

    @app.put("/api/tasks/{task_id}/assignee")
    def assign(lx: LX, who: Who, task_id: int, body: Body) -> dict[str, Any]:
        lx.service.assign(who.user, task_id, body.get("assignee") or None)
        return {"ok": True}

    @app.get("/api/tasks/{task_id}")
    def task(lx: LX, who: Who, task_id: int) -> dict[str, Any]:
        return lx.service.task_view(who.user, task_id)

    @app.post("/api/tasks/{task_id}/submit")
    def submit(lx: LX, who: Who, task_id: int) -> dict[str, Any]:
        return lx.service.submit(who.user, task_id)

    @app.post("/api/items/{item_id}/claim")
    def claim(lx: LX, who: Who, item_id: int) -> dict[str, Any]:
        return item_json(lx.service.claim(who.user, item_id))

    @app.put("/api/items/{item_id}")
    def save(lx: LX, who: Who, item_id: int, body: Body) -> dict[str, Any]:
        item = lx.service.save(
            who.user, item_id, _int(body, "version"), body.get("value"), skip=bool(body.get("skip"))
        )
        return item_json(item)

    @app.post("/api/items/{item_id}/review")
    def review(lx: LX, who: Who, item_id: int, body: Body) -> dict[str, Any]:
        item = lx.service.review(
            who.user, item_id, _int(body, "version"), bool(body.get("accept")), str(body.get("comment") or "")
        )
        return item_json(item)

    @app.get("/api/items/{item_id}/image")
    def image(lx: LX, who: Who, item_id: int, size: str = "preview") -> Response:
        item = lx.service.item_for(who.user, item_id)
        ref = ObjectRef(item.url, item.etag, item.size)
        if size == "original":
            data, media = lx.images.read(ref), "application/octet-stream"
        else:
            data, media = lx.images.preview(ref, size), "image/jpeg"
        # the URL names immutable bytes for this item (record etag), so browsers may keep it
        return Response(data, media_type=media, headers={"Cache-Control": "private, max-age=86400"})
