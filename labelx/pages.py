"""The browser pages: login/logout and the HTML shells whose scripts call the JSON API.

Templates are Jinja2 (``datahub.web.Pages``, autoescaped) over the base layout the dataset
browser uses too; the page's data goes into a ``<script type="application/json">`` block, so
no inline script is needed and the strict Content-Security-Policy holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, unquote, urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from datahub.api.local_mode import foreign_user, is_loopback
from datahub.errors import AccessDenied, DatahubError, TooManyAttempts, Unauthenticated
from datahub.web import Pages
from datahub.web.cookies import delete_cookie, read_cookie, secure_cookie, set_cookie
from datahub.web.forms import FOREIGN_FORM, sent_from_elsewhere
from labelx.auth import SESSION_TTL, Principal
from labelx.deps import LX, RowId, Who, demo_password_path, get_labelx
from labelx.service import project_json

PAGES = Pages(Path(__file__).parent / "templates", {"app_name": "LabelX"})
router = APIRouter()
# The user name a refused login typed (``Auth.login_name_cookie``) is kept for the form shown
# next (a wrong password, an expired form): the person types only the password again. A cookie,
# not the URL, so the name stays out of access logs and the browser's history; the form's next
# success deletes it.
LOGIN_NAME_KEPT = 200  # characters: a longer "name" is no one's and would not fit a cookie


def base_path(request: Request) -> str:
    return request.scope.get("root_path", "").rstrip("/")


def cookie_path(request: Request) -> str:
    """Cookies stay with LabelX: mounted under /labelx, the parent app never receives them."""
    return base_path(request) or "/"


def _secure(request: Request) -> bool:
    """Configured, over https, or sent from an https page behind a TLS proxy (``datahub.web.cookies``)."""
    return secure_cookie(request, always=get_labelx(request).secure_cookies)


def _set(response: Response, request: Request, name: str, value: str, max_age: int | None = None) -> None:
    """A LabelX cookie: ``__Host-`` + ``name`` at ``/`` when Secure, else at LabelX's own path
    (``datahub.web.cookies.set_cookie``). Under ``datahub serve`` a Secure one is thus sent to
    the dataset browser's pages too, which read only their own names (``datahub_*``)."""
    always = get_labelx(request).secure_cookies
    set_cookie(response, request, name, value, path=cookie_path(request), always=always, max_age=max_age)


def held(request: Request, name: str) -> str:
    """The value of LabelX's cookie ``name`` (``datahub.web.cookies.read_cookie``)."""
    return read_cookie(request, name, always=get_labelx(request).secure_cookies)


def _render(name: str, request: Request, boot: Any = None, **values: Any) -> HTMLResponse:
    """A page: signed-in pages extend ``_layout.html`` (top bar) and load ``static/<page>.js``
    and ``common.js``; the login page stands alone on the base layout with no script."""
    base = base_path(request)
    page = Path(name).stem
    scripts = [] if boot is None else [f"{base}/static/common.js", f"{base}/static/{page}.js"]
    return HTMLResponse(
        PAGES.render(
            name,
            base=base,
            page=page,
            boot=boot,
            scripts=scripts,
            stylesheets=[f"{base}/static/app.css"],
            favicon=f"{base}/static/favicon.svg",
            **values,
        )
    )


def error_page(request: Request, exc: DatahubError) -> HTMLResponse:
    """What a person opening a LabelX page it cannot show reads: the reason, with its status."""
    response = _render(
        "error.html", request, title=f"{exc.http_status} {exc.code}", code=exc.code, message=exc.message
    )
    response.status_code = exc.http_status
    return response


def login_url(request: Request, page: str | None = None) -> str:
    """The login form that comes back to ``page`` (this request's own page by default) once
    signed in. Why: a session that ended (12 h) sent a person labelling task 7 to the login
    form and then to the project list, to find the task and the item again."""
    base = base_path(request)
    if page is None:
        page = request.url.path.removeprefix(base) + (f"?{request.url.query}" if request.url.query else "")
    page = _page_after_login(page)
    return base + "/login" + (f"?{urlencode({'next': page})}" if page != "/" else "")


def _page_after_login(page: str) -> str:
    """A page of this LabelX (a path under its mount), never another site's or the login form."""
    if not page.startswith("/") or page.startswith("//") or any(c in page for c in "\\\r\n\t"):
        return "/"
    return "/" if page.startswith("/login") or page.startswith("/logout") else page


def _page(template: str, title: str, request: Request, who: Principal, **boot: Any) -> HTMLResponse:
    user = {"name": who.user.name, "role": who.user.role}
    data = {"base": base_path(request), "csrf": who.csrf or "", "user": user, **boot}
    return _render(template, request, title=title, user=who.user.name, role=who.user.role, boot=data)


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, error: str = "", next: str = "/") -> HTMLResponse:
    name = unquote(held(request, get_labelx(request).auth.login_name_cookie)) if error else ""
    return _login_form(request, "" if error == "throttled" else error, next, name)


def _login_form(
    request: Request, error: str, next: str, name: str, throttled: TooManyAttempts | None = None
) -> HTMLResponse:
    """The sign-in form; after ``throttled`` (a 429 of the throttle), answered 429 with its
    ``Retry-After`` and saying how long to wait (``error="throttled"`` in the address says
    nothing: only this answer does)."""
    lx = get_labelx(request)
    token = lx.auth.new_form_token()
    demo_password = demo_password_path(lx.config)
    retry = throttled.details["retry_after"] if throttled else ""
    resp = _render(
        "login.html",
        request,
        title="Log in",
        csrf=token,
        error="throttled" if throttled else error,
        retry=retry,
        login_name=name,
        demo_password=str(demo_password) if demo_password.exists() and _may_read(request) else "",
        no_users=not lx.store.has_users(),
        cli=lx.cli,  # the create-user command as this server's user runs datahub (newuser72)
        next=_page_after_login(next),
    )
    _set(resp, request, lx.auth.login_csrf_cookie, token)
    if throttled:
        resp.status_code = throttled.http_status
        resp.headers["Retry-After"] = str(retry)
    return resp


def _may_read(request: Request) -> bool:
    """Whether the caller is this server's user (or root) on this machine: on loopback, from a
    socket of that user (``foreign_user``). Only they can read ``make run``'s 0600 password
    file, so only they are told its path. Why (caller73): the page named it to anyone who loaded
    it, over any address and to any user of the machine, telling a stranger the server's home
    (the account it runs as) and that ``admin`` still had the demo's first password."""
    client = request.scope.get("client")
    return bool(client) and is_loopback(client[0]) and foreign_user(request.scope) is None


@router.post("/login")
def login(
    request: Request,
    lx: LX,
    name: Annotated[str, Form()],
    password: Annotated[str, Form()],
    csrf: Annotated[str, Form()],
    next: Annotated[str, Form(max_length=4096)] = "/",
) -> Response:
    if sent_from_elsewhere(request):  # a same-site page on another port plants the cookie (login CSRF)
        return error_page(request, AccessDenied(FOREIGN_FORM))
    if not lx.auth.form_token_ok(held(request, lx.auth.login_csrf_cookie), csrf):
        return _login_refused(request, "expired", name, next)
    try:
        session_id, _ = lx.auth.login(name, password, request.client.host if request.client else None)
    except Unauthenticated:
        return _login_refused(request, "wrong", name, next)
    except TooManyAttempts as exc:  # the form again, answered 429 with Retry-After
        return _login_form(request, "", next, name if len(name) <= LOGIN_NAME_KEPT else "", exc)
    if old := held(request, lx.auth.session_cookie):  # this labelx.db's own (another LabelX's: its own name)
        # the session this browser held ends with its cookie: kept, it lived 12 h more in the
        # store, though no browser showed it any more (another person signing in on a shared
        # machine; a session cookie copied earlier went on working)
        lx.auth.logout(old)
    resp = RedirectResponse(base_path(request) + _page_after_login(next), status_code=303)
    delete_cookie(resp, lx.auth.login_csrf_cookie, path=cookie_path(request))
    delete_cookie(resp, lx.auth.login_name_cookie, path=cookie_path(request))
    _set(resp, request, lx.auth.session_cookie, session_id, max_age=int(SESSION_TTL))
    return resp


def _login_refused(request: Request, error: str, name: str, next: str) -> Response:
    """Back to the form, saying why (``error``), with the user name typed kept for it: before,
    the form came back empty after a wrong password and the person typed the name again."""
    query = {"error": error, **({"next": _page_after_login(next)} if _page_after_login(next) != "/" else {})}
    resp = RedirectResponse(base_path(request) + f"/login?{urlencode(query)}", status_code=303)
    if len(name) <= LOGIN_NAME_KEPT:
        _set(resp, request, get_labelx(request).auth.login_name_cookie, quote(name, safe=""), max_age=600)
    return resp


@router.post("/logout")
def logout(request: Request, lx: LX, who: Who) -> Response:
    lx.auth.logout(held(request, lx.auth.session_cookie))
    resp = JSONResponse({"ok": True})
    delete_cookie(resp, lx.auth.session_cookie, path=cookie_path(request))
    return resp


@router.get("/", response_class=HTMLResponse)
def home(request: Request, who: Who) -> HTMLResponse:
    return _page("home.html", "Projects", request, who)


@router.get("/projects/{project_id}", response_class=HTMLResponse)
def dashboard(request: Request, lx: LX, who: Who, project_id: RowId) -> HTMLResponse:
    project = lx.service.project_for(who.user, project_id)
    return _page("dashboard.html", project.name, request, who, project=project_json(project), cli=lx.cli)


@router.get("/projects/{project_id}/review", response_class=HTMLResponse)
def review_page(request: Request, lx: LX, who: Who, project_id: RowId) -> HTMLResponse:
    project = lx.service.project_for(who.user, project_id)
    lx.service.require_reviewer(who.user)  # the page, not only its queue: an error page says so
    return _page("review.html", f"Review {project.name}", request, who, project=project_json(project))


@router.get("/tasks/{task_id}", response_class=HTMLResponse)
def annotate_page(request: Request, lx: LX, who: Who, task_id: RowId) -> HTMLResponse:
    view = lx.service.task_view(who.user, task_id)
    return _page("annotate.html", view["project"]["name"], request, who, task_id=task_id)


@router.get("/admin", response_class=HTMLResponse)
def admin_page(request: Request, lx: LX, who: Who) -> HTMLResponse:
    lx.service.require_admin(who.user)
    return _page("admin.html", "Admin", request, who)
