"""The browser's routes: HTML pages under ``/``, thumbnails and chart images.

Every route reads through the same services, tokens and ACLs as the JSON API (``session``
for the caller, ``datahub.api.access.require`` for the dataset), so a dataset the caller may
not read is the same 404 here as there. Errors become an HTML page with the error's status
and message (``PageRoute``); signing in is a redirect to ``/login``. Every response carries
the shared security headers and ``no-store`` (``datahub.web.page_headers``).
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute

from datahub.api.access import Principal, require
from datahub.api.deps import Services
from datahub.api.errors import as_run
from datahub.api.lineage import LineageView
from datahub.api.routes.pagination import decode_cursor, encode_cursor
from datahub.browser import charts, diffs, folders, lineage, listing, session
from datahub.catalog import Catalog
from datahub.catalog.catalog import first_version
from datahub.catalog.filter import RecordFilter
from datahub.catalog.model import Dataset, Version
from datahub.errors import (
    DatahubError,
    InvalidInput,
    ObjectChanged,
    ObjectNotFound,
    RecordNotFound,
    StorageError,
    Unauthenticated,
)
from datahub.validation import check_key, check_name, check_prefix, is_ref, without_password
from datahub.web import Pages, page_headers
from datahub.web.cookies import delete_cookie
from datahub.web.revalidate import private_answer, strong_etag

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff")
PAGE = 100  # entries per page everywhere
VERSIONS_PAGE = 50


class PageRoute(APIRoute):
    """Errors as pages: a DatahubError renders ``error.html`` with its status; no session is a
    redirect to the login page (a bad ``Authorization`` header is a 401 page naming why: a
    script sent it, and a login form is no answer to a script); every response gets the security headers."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                response = await handler(request)
            except Unauthenticated as exc:
                if "authorization" in request.headers:  # a script's token: say why, as the API does
                    response = error_page(request, exc.http_status, exc.code, exc.message)
                    response.headers["WWW-Authenticate"] = "Bearer"
                else:
                    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                    query = {"next": target}
                    if exc.details.get("reason") == "ended":  # a cookie came: say why it no longer opens
                        query["error"] = "ended"
                    response = RedirectResponse(f"/login?{urlencode(query)}", status_code=303)
            except DatahubError as exc:
                response = error_page(request, exc.http_status, exc.code, exc.message)
            except RequestValidationError as exc:
                response = error_page(request, 400, "invalid_input", _invalid_parameter(exc))
            for name, value in page_headers().items():  # a picture keeps its own Cache-Control
                response.headers.setdefault(name, value)
            return response

        return run


def _invalid_parameter(exc: RequestValidationError) -> str:
    """Which parameter of the address does not fit, and why (not only that one does not)."""
    first = (exc.errors() or [{}])[0]
    name = str((first.get("loc") or ("parameter",))[-1])
    if first.get("type") == "int_parsing":
        reason = f"{first.get('input')!r} is not a valid integer"
    else:
        reason = str(first.get("msg", "does not fit"))
    return f"a parameter of this page is not valid: {name}: {reason}"


router = APIRouter(route_class=PageRoute, include_in_schema=False)


class Browser:
    """What the pages hold between requests: templates, pictures and the summaries' caches."""

    def __init__(self, services: Services, images: Any, *, labelx: bool = False) -> None:
        self.services = services
        self.images = images
        self.labelx = labelx
        # the command the snippets show (``cli``, kept in the services): an installed datahub is
        # on the reader's PATH; ``make run`` serves from a checkout's .venv, which is not, and
        # sets its own (datahub.demo)
        # the PyTorch script's interpreter and the home its configuration names (None: the
        # reader's own, ``load_config()``); ``make run`` sets both to its venv and ./var
        self.python = "python"
        self.home: str | None = None
        self.config_file: str | None = None  # make run's --config FILE
        self.catalog_url: str | None = None  # serve --catalog URL (or a setting): not the home's
        # SUMMARY: characters of a message or description shown in a table row (the version
        # and dataset pages show them whole; 4 KiB of one message made a row a page long)
        self.pages = Pages(Path(__file__).parent / "templates", {"app_name": "datahub", "SUMMARY": 200})
        self.pages.env.filters.update(
            size=charts.human_size, records=charts.records, when=_when, label=_label
        )
        self.summaries = charts.Summaries()
        self.counts = diffs.Counts()

    @property
    def catalog(self) -> Catalog:
        return self.services.catalog

    @property
    def cli(self) -> str:
        """The command the pages name: the API's (``Services.cli``), so a page and the API's
        answers name the same (the sign-in messages named a bare ``datahub``, newuser72)."""
        return self.services.cli

    @cli.setter
    def cli(self, command: str) -> None:
        self.services.cli = command


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M UTC") if ts else ""


def _label(value: Any) -> str:
    """A label value on a record's card as the filter language and the record page write it
    (JSON: ``true``, ``null``, ``{"x": 1}``, not Python's ``True``, ``None``, ``{'x': 1}``),
    cut at 80 characters so one large value cannot fill the card."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 80 else text[:79] + "…"


def browser_of(request: Request) -> Browser:
    return request.app.state.browser


def render(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    b = browser_of(request)
    principal = getattr(request.state, "principal", None)
    local = b.services.config.api.local_mode
    html = b.pages.render(
        template,
        stylesheets=["/static/browser.css"],
        scripts=["/static/browser.js"],
        favicon="/static/favicon.svg",
        boot=None,
        who=principal.name if principal else "",
        local_mode=local,
        labelx=b.labelx,
        cli=b.cli,  # the commands a page names run as shown: under make run, the checkout's venv
        # a signed-in page's only (so a local-mode page never asks the catalog for its id)
        logout_csrf=session.cookie(request, session.login_csrf_cookie(b.services))
        if principal and not local
        else "",
        **values,
    )
    return HTMLResponse(html, status_code=status)


def error_page(request: Request, status: int, code: str, message: str) -> HTMLResponse:
    """The error as a page. Under a dataset's address (a version, record, diff or filter that
    does not fit) it links back to that dataset, which exists: a new user who mistyped a version
    had only "All datasets". Never for ``dataset_not_found`` or a refusal, so an unreadable
    dataset's page stays exactly a missing one's (docs/browser.md, "Access")."""
    name = (
        request.path_params.get("name", "")
        if code != "dataset_not_found" and status not in (401, 403)
        else ""
    )
    try:  # a name no dataset can have (/datasets/Bad%20Name): "Back to Bad Name" led to this page again
        check_name(name)
    except InvalidInput:
        name = ""
    message = as_run(message, browser_of(request).cli)  # as make run's user runs it (newuser24)
    return render(
        request, "error.html", status, title=f"{status} {code}", code=code, message=message, dataset=name
    )


def cursor_of(text: str, parameter: str = "cursor") -> str:
    """A page's cursor: the API's (base64url of a position in key order), read the API's way;
    a bad one is a 400 naming ``parameter``, the page's own query parameter."""
    return decode_cursor(text, parameter=parameter)


def to_cursor(position: str | None) -> str | None:
    return None if position is None else encode_cursor(position)


def _dataset(request: Request, name: str) -> tuple[Browser, Principal, Dataset]:
    b = browser_of(request)
    principal = session.caller(request, b.services)
    dataset = b.catalog.get_dataset(name)
    require(principal, dataset, "reader")
    return b, principal, dataset


def _lineage_view(b: Browser, principal: Principal) -> LineageView:
    """The API's rule for what a version says of its source (``datahub.api.lineage``): every
    page showing a version's message or lineage shows it through this, so no page names a
    dataset the caller may not read."""
    return LineageView(principal, b.catalog.get_dataset)


def _filter(text: str) -> RecordFilter | None:
    return RecordFilter.parse(text) if text.strip() else None


def _page_filter(text: str) -> tuple[RecordFilter | None, str]:
    """A version page's filter and, when it does not parse, why (``""`` when it does). Why: a
    filter with a syntax error (``labels.class==cat``) replaced the whole page with an error
    page, the filter box and the text typed in it gone, so fixing a typo meant going back and
    typing the filter again (newuser72): the page now lists the folder unfiltered and says why
    beside the box, which keeps the text."""
    try:
        return _filter(text), ""
    except InvalidInput as exc:
        return None, exc.message


def is_image(key: str) -> bool:
    return key.lower().endswith(IMAGE_SUFFIXES)


@router.get("/favicon.ico")
def favicon() -> Response:
    """Browsers ask for it on every page without an icon of its own (a chart opened alone)."""
    icon = (Path(__file__).parent / "static" / "favicon.svg").read_bytes()
    return Response(icon, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"})


# --- sign in ------------------------------------------------------------------------------------
@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str = "/", error: str = "") -> Response:
    b = browser_of(request)
    token = session.cookie(request, session.login_csrf_cookie(b.services))
    if not session.form_token_ok(b.services, token):  # none yet, or another server's
        token = session.new_login_csrf(b.services)
    response = render(
        request,
        "login.html",
        title="Sign in",
        csrf=token,
        next=_local_path(next),
        # a code: never the address's own text; its command as this server's user runs datahub
        error=as_run(session.SIGN_IN_ERRORS.get(error, ""), b.cli),
        local=b.services.config.api.local_mode,
    )
    _set_form_cookie(request, response, token)
    return response


def _set_form_cookie(request: Request, response: Response, token: str) -> None:
    session.put_cookie(response, request, session.login_csrf_cookie(browser_of(request).services), token)


def _local_path(target: str) -> str:
    """Only a path of this site may follow a login (no open redirect)."""
    return target if target.startswith("/") and not target.startswith("//") and "\\" not in target else "/"


@router.post("/login")
def login(
    request: Request,
    token: Annotated[str, Form(max_length=session.MAX_TOKEN_CHARS)],
    csrf: Annotated[str, Form(max_length=200)],
    next: Annotated[str, Form(max_length=4096)] = "/",
) -> Response:
    session.check_form(request, csrf)
    b = browser_of(request)
    try:
        session_id = session.sign_in(b.services, token)
    except Unauthenticated as exc:
        query = urlencode({"next": _local_path(next), "error": exc.details.get("reason", "invalid")})
        return RedirectResponse(f"/login?{query}", status_code=303)
    # the session this browser held ends with its cookie (another person signing in on a
    # shared machine), as LabelX's login does
    name = session.session_cookie(b.services)
    session.sign_out(b.services, session.cookie(request, name))
    response = RedirectResponse(_local_path(next), status_code=303)
    session.put_cookie(response, request, name, session_id, max_age=session.SESSION_SECONDS)
    return response


@router.post("/logout")
def logout(request: Request, csrf: Annotated[str, Form(max_length=200)]) -> Response:
    """End the session server-side (a copy of its cookie stops working), then the cookie."""
    session.check_form(request, csrf)
    b = browser_of(request)
    name = session.session_cookie(b.services)
    if not b.services.config.api.local_mode:
        session.sign_out(b.services, session.cookie(request, name))
    response = RedirectResponse("/login", status_code=303)
    delete_cookie(response, name)
    return response


# --- datasets -----------------------------------------------------------------------------------
@router.get("/", response_class=HTMLResponse)
def datasets_page(request: Request, q: str = "", after: str = "") -> Response:
    b = browser_of(request)
    principal = session.caller(request, b.services)
    rows, last = listing.dataset_rows(
        b.catalog, principal, search=q[:200], after=cursor_of(after, "after"), limit=PAGE
    )
    view = _lineage_view(b, principal)  # a pack target's old description names its source
    rows = [replace(row, dataset=view.dataset(row.dataset)) for row in rows]
    more = None if last is None else "?" + urlencode({"q": q, "after": to_cursor(last)})
    # a later page links back to the first: it had Next only (newuser27)
    first = ("?" + urlencode({"q": q}) if q else "/") if after else None
    return render(request, "datasets.html", title="Datasets", rows=rows, q=q, more=more, first=first)


@router.get("/datasets", response_class=HTMLResponse)
def datasets_cut_back(request: Request) -> Response:
    """``/datasets`` (a dataset's address cut back, as its breadcrumb "Datasets" reads): the
    datasets' page at ``/``, for a caller as every page (no credential: the sign-in first). It
    was "no page at /datasets" (newuser71)."""
    session.caller(request, browser_of(request).services)
    return RedirectResponse("/", 303)


@router.get("/datasets/{name}/versions", response_class=HTMLResponse)
def versions_cut_back(request: Request, name: str) -> Response:
    """``/datasets/NAME/versions`` (a version's address cut back): the dataset's page, which
    lists its versions; a dataset the caller may not read answers as a missing one first. It
    was "no page at /datasets/NAME/versions" (newuser71)."""
    _dataset(request, name)
    return RedirectResponse(f"/datasets/{quote(name)}", 303)


@router.get("/datasets/{name}", response_class=HTMLResponse)
def dataset_page(request: Request, name: str, before: int = 0) -> Response:
    if "@" in name[1:]:  # NAME@v3, as the CLI writes a version: it was 400 "invalid dataset name" (newuser36)
        base, _, ref = name.partition("@")
        return RedirectResponse(f"/datasets/{quote(base)}/versions/{quote(ref or 'latest')}", 303)
    b, principal, dataset = _dataset(request, name)
    view = _lineage_view(b, principal)
    versions = [view.version(v) for v in b.catalog.log(name)]
    shown = [v for v in versions if not before or v.seq < before][:VERSIONS_PAGE]
    older = shown[-1].seq if shown and shown[-1].seq > versions[-1].seq else None
    visible = {d.name for d in listing.readable(b.catalog, principal)}
    others = ((other, b.catalog.log(other)) for other in sorted(visible) if other != name)
    graph = lineage.build(name, versions, others) if versions else lineage.Graph()
    origins = {v.seq: lineage.origin(v.lineage) for v in shown}
    return render(
        request,
        "dataset.html",
        title=name,
        dataset=view.dataset(dataset),
        versions=shown,
        origins=origins,
        tags=listing.tags_of(versions),
        graph=graph,
        node=(lineage.NODE_W, lineage.NODE_H),
        older=older,
        newer=bool(before),  # a later page links back to the newest versions (newuser27)
        head=versions[0] if versions else None,
    )


# --- a version ----------------------------------------------------------------------------------
@router.get("/datasets/{name}/versions/{ref}", response_class=HTMLResponse)
def version_page(
    request: Request, name: str, ref: str, prefix: str = "", filter: str = "", cursor: str = ""
) -> Response:
    b, principal, _ = _dataset(request, name)
    meant = _ref_meant(name, ref)
    if meant is not None:  # .../versions/sample@v1 or @v1, the CLI's way: it was 400 "invalid
        # version 'sample@sample@v1': write DATASET@VERSION", naming what nobody typed (newuser73)
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"/datasets/{quote(name)}/versions/{quote(meant)}{query}", 303)
    version = _lineage_view(b, principal).version(b.catalog.resolve(name, ref))
    check_prefix(prefix)
    if prefix and not prefix.endswith("/"):
        return _folder_or_record(b, name, ref, version.seq, prefix, filter)
    typed = filter
    where, filter_error = _page_filter(typed)
    if filter_error:  # listed without it: no link, chart or snippet carries what did not parse
        filter = ""
    entries, position = folders.browse(
        b.catalog, name, version.seq, prefix=prefix, where=where, after=cursor_of(cursor), limit=PAGE
    )
    query = {"prefix": prefix, "filter": filter}
    more = None if position is None else "?" + urlencode({**query, "cursor": to_cursor(position)})
    first = _first_page(query) if cursor else None
    # a folder that holds nothing at all (with or without the filter): where to go instead
    empty = (
        not entries
        and not cursor
        and (not where or not folders.browse(b.catalog, name, version.seq, prefix=prefix, limit=1)[0])
    )
    nearest, kept = _nearest(b, name, version.seq, prefix, where, filter) if empty else (None, filter)
    # a filter that matches nothing where there are records: what their labels are, as the
    # unfiltered charts count them (a misspelt labels.clas=cat, or Cat for cat, said only "No
    # record matches labels.clas=cat here."; newuser26)
    unmatched = where is not None and not entries and not cursor and not empty
    labels_here = _labels_here(b, name, version.seq, prefix) if unmatched else None
    chart_query = urlencode(query)
    ref_text = f"{name}@v{version.seq}"
    return render(
        request,
        "version.html",
        400 if filter_error else 200,
        title=ref_text,
        name=name,
        version=version,
        prefix=prefix,
        filter=filter,
        typed_filter=typed,
        filter_error=filter_error,
        crumbs=folders.parent_prefixes(prefix),
        entries=entries,
        nearest=nearest,
        nearest_filter=kept,
        labels_here=labels_here,
        more=more,
        first=first,
        is_image=is_image,
        chart_query=chart_query,
        # a folder that holds nothing: the snippets go where the page sends the reader (its
        # "Mount it" ended `ls /mnt/…/train/nope`, which fails as written; newuser25)
        snippets=_snippets(b, name, version, *((nearest[0], kept) if nearest else (prefix, filter))),
        sample=charts.SAMPLE,
    )


def _nearest(
    b: Browser, name: str, seq: int, prefix: str, where: RecordFilter | None, filter: str
) -> tuple[tuple[str, list[folders.Entry], bool] | None, str]:
    """Where a page of a folder that holds nothing sends the reader, and the filter its links and
    snippets keep: the nearest folder above holding a record the filter matches, listed with
    it; if the filter matches no record of the version, the nearest holding anything, without
    it (``""``). Why: listed without the filter while its links and PyTorch script kept it,
    ``?prefix=val/nope/&filter=labels.class=cat`` showed val/'s pictures and offered a script
    that read no sample of them: "no records under prefix 'val/' matching filter" (newuser43)."""
    found = folders.nearest_holding(b.catalog, name, seq, prefix, where=where)
    if found is not None or where is None:
        return found, filter
    return folders.nearest_holding(b.catalog, name, seq, prefix), ""


def _first_page(query: dict[str, Any]) -> str:
    """The query of a listing's first page: the same one without its cursor and empty values."""
    kept = {k: v for k, v in query.items() if v not in ("", None)}
    return "?" + urlencode(kept) if kept else ""


def _labels_here(b: Browser, name: str, seq: int, prefix: str) -> list[str]:
    """Each label field of the records under ``prefix`` with its most common values
    (``labels.class: airplane, automobile, …``), from the charts' summary of the prefix without
    a filter (kept in the same LRU the chart images use)."""
    summary = b.summaries.get(
        (name, seq, prefix, ""),
        lambda: charts.summarise(b.catalog.store.list_records(name, seq, prefix=prefix)),
    )
    shown = []
    for chart in summary.labels:
        values = [bar.label for bar in chart.bars[:SHOWN_VALUES]]
        more = ", …" if len(chart.bars) > SHOWN_VALUES else ""
        shown.append(f"{chart.title.split(' (')[0]}: {', '.join(values)}{more}")
    return shown


SHOWN_VALUES = 6  # values of a label field a page that matches nothing names


def _folder_or_record(b: Browser, name: str, ref: str, seq: int, prefix: str, filter: str) -> Response:
    """A ``?prefix=`` without its closing ``/`` (typed into the address: ``?prefix=train/cat``)
    goes to the record of that key, if there is one, else to that folder. Why: the page lists a
    folder's entries, and read as the start of keys it showed one folder named ``/`` and
    breadcrumbs without ``cat`` (newuser26)."""
    if b.catalog.store.get_records(name, seq, [prefix]):
        return RedirectResponse(f"/datasets/{quote(name)}/versions/{quote(ref)}/records/{quote(prefix)}", 303)
    query = urlencode({"prefix": prefix + "/", "filter": filter} if filter else {"prefix": prefix + "/"})
    return RedirectResponse(f"/datasets/{quote(name)}/versions/{quote(ref)}?{query}", 303)


def _snippets(b: Browser, name: str, version: Version, prefix: str, filter: str) -> list[tuple[str, str]]:
    ref = f"{name}@v{version.seq}"
    url = f"datahub://{ref}/{prefix}"
    # the folder the page shows, as the fsspec and PyTorch lines have it: `ls` listed the
    # version's top folder from a page of train/cat/ (newuser22); quoted, a key may hold spaces
    files = shlex.quote(f"/mnt/{name}/{name}/v{version.seq}/{prefix}".rstrip("/"))
    return [
        # then where the files are: a mount lays a version out as MNT/<dataset>/v<N>/, and a new
        # user looked for them in MNT/ itself, which holds only the dataset's name (newuser19)
        (
            "Mount it",
            f"mkdir -p /mnt/{name} && {b.cli} mount --background /mnt/{name} {ref} && ls {files}",
        ),
        ("fsspec URL", url),
        (
            "PyTorch",
            torch_script(
                b.python,
                b.home,
                name,
                version.seq,
                prefix,
                filter,
                packed=_packed(version),
                config_file=b.config_file,
                catalog_url=b.catalog_url,
            ),
        ),
    ]


def _packed(version: Version) -> bool:
    """A version ``datahub pack`` made: shards and ``index.json``, read with PackedDataset."""
    return isinstance(version.lineage, dict) and version.lineage.get("kind") == "pack"


def torch_script(
    python: str,
    home: str | None,
    name: str,
    seq: int,
    prefix: str,
    filter: str,
    *,
    packed: bool = False,
    config_file: str | None = None,
    catalog_url: str | None = None,
) -> str:
    """A whole script reading this page's records in a DataLoader, to save and run as it says.

    Why whole: the line it replaces, ``VersionDataset.from_catalog(catalog, "pets", "v1",
    CacheSource(config))``, named three things it never defined and no import; a new user
    pasting it got a NameError, then had to find which of datahub's modules holds each. The
    script opens the configuration the page's server uses (``make run``'s home, else the
    reader's own ``load_config()``) and iterates one epoch (``tests/browser/
    test_newuser_commands.py`` runs it as shown against ``make run``'s data). A packed
    version's records are LMDB shards: its script opens them with PackedDataset.

    ``catalog_url``: the catalog the server was given (``serve --catalog URL``, a setting), which
    the home's ``catalog.db`` is not; the script opened that one, where the page's dataset is
    not (newuser34). A password in it is not shown: the script says where to put it."""
    overrides = {"home": home} if home else {}
    hidden = ""
    if catalog_url:  # the catalog the page showed; the home's catalog.db is another one
        overrides["catalog_url"], hidden = _without_password(catalog_url)
    given = [repr(config_file)] if config_file else []
    given += [f"overrides={overrides!r}"] if overrides else []
    config = f"load_config({', '.join(given)})"
    if packed:  # its records are shards: VersionDataset would decode an LMDB file as a picture
        kind = "PackedDataset"
        shards = f"config.home_path / 'shards' / {f'{name}@v{seq}'!r}"
        made = (
            f"PackedDataset.open(catalog, CacheSource(config), {name!r}, {f'v{seq}'!r}, cache_dir={shards})"
        )
    else:
        kind = "VersionDataset"
        args = f"{name!r}, {f'v{seq}'!r}, CacheSource(config)"
        args += f", prefix={prefix!r}" if prefix else ""
        args += f", where={filter!r}" if filter else ""
        made = f"VersionDataset.from_catalog(catalog, {args})"
    return f"""\
# save as train.py, then run: {python} train.py{hidden}
from torch.utils.data import DataLoader

from datahub.catalog import open_catalog
from datahub.config import load_config
from datahub.torch import CacheSource, {kind}

if __name__ == "__main__":  # DataLoader's worker processes import this file: they must not run it
    config = {config}
    catalog = open_catalog(config.resolved_catalog_url, retry=config.catalog)
    # a sample: (uint8 image tensor (3, H, W), the record's labels); transform=... for other files
    dataset = {made}
    loader = DataLoader(dataset, batch_size=None, shuffle=True, num_workers=2)
    samples = 0
    for image, labels in loader:
        samples += 1  # train here
    print(f"{{samples}} samples of {name}@v{seq} read")
"""


def _without_password(url: str) -> tuple[str, str]:
    """``url`` with its password (``mongodb://user:PASSWORD@host/db``) replaced by ``****``,
    and the script's line saying so: a page's reader need not be the catalog's owner, and
    every reader of the page would read it."""
    shown = without_password(url)  # the rule of every error naming a URL too
    if shown == url:
        return url, ""
    return shown, "\n# the catalog's password is not shown: put it in place of **** below"


@router.get("/datasets/{name}/versions/{ref}/records/{key:path}", response_class=HTMLResponse)
def record_page(request: Request, name: str, ref: str, key: str) -> Response:
    b, _, _ = _dataset(request, name)
    version = b.catalog.resolve(name, ref)
    if not key:  # .../records/ (an address cut back to its folder): the version's records page; it
        # was "invalid key: a record key must be a non-empty relative path" (newuser26)
        return RedirectResponse(f"/datasets/{quote(name)}/versions/{quote(ref)}", 303)
    if key.endswith("/"):  # a folder's address (.../records/train/cat/): its page; it was 400 "invalid
        # key 'train/cat/': empty, '.' or '..' path segments are not allowed" (newuser43)
        return _folder_page(name, ref, key)
    try:
        record = b.catalog.get_record(name, version.seq, check_key(key))
    except RecordNotFound as e:  # .../records/train/cat, a folder named as a record: that folder
        if not folders.browse(b.catalog, name, version.seq, prefix=key + "/", limit=1)[0]:
            raise _no_record(b.catalog, name, version.seq, key) from e
        return _folder_page(name, ref, key + "/")
    folder = key.rpartition("/")[0]
    return render(
        request,
        "record.html",
        title=key,
        name=name,
        version=version,
        record=record,
        crumbs=folders.parent_prefixes(folder + "/" if folder else ""),
        image=is_image(key),
        meta=_pretty(record.meta),
        labels=_pretty(record.labels),
    )


def _ref_meant(name: str, ref: str) -> str | None:
    """The version an address's ``NAME@REF`` or ``@REF`` segment means (``v1``), as the dataset's
    own address takes ``NAME@REF``; None for a plain ref or one naming another dataset."""
    head, at, tail = ref.rpartition("@")
    return tail if at and head.strip("@") in ("", name) and is_ref(tail) else None


def _no_record(catalog: Catalog, name: str, seq: int, key: str) -> RecordNotFound:
    """A record address naming none, with the ``ls`` that lists what its folder (or, with that
    folder empty too, the version) has: the page said only "dataset 'sample' version 1 has no
    record 'train/cat/0999.jpg'", with nothing on where the records are (newuser73)."""
    folder = key.rpartition("/")[0] + "/" if "/" in key else ""
    if folder and not folders.browse(catalog, name, seq, prefix=folder, limit=1)[0]:
        folder = ""
    listing = f"datahub ls {name}@v{seq}" + (f" --prefix {shlex.quote(folder)}" if folder else "")
    what = f"the records of its folder {folder!r}" if folder else f"the records of {name}@v{seq}"
    return RecordNotFound(
        f"dataset {name!r} version {seq} has no record {key!r}; `{listing}` lists {what}",
        dataset=name,
        version=seq,
        key=key,
    )


def _folder_page(name: str, ref: str, prefix: str) -> Response:
    return RedirectResponse(
        f"/datasets/{quote(name)}/versions/{quote(ref)}?{urlencode({'prefix': prefix})}", 303
    )


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@router.get("/datasets/{name}/versions/{seq}/charts/{which}.svg")
def chart_image(
    request: Request, name: str, seq: int, which: str, prefix: str = "", filter: str = ""
) -> Response:
    b, _, _ = _dataset(request, name)
    if which not in ("labels", "sizes"):
        raise InvalidInput(f"no chart {which!r}: use labels.svg or sizes.svg")
    version = b.catalog.resolve(name, seq)
    check_prefix(prefix)
    where = _filter(filter)
    summary = b.summaries.get(
        (name, version.seq, prefix, str(where or "")),
        lambda: charts.summarise(b.catalog.store.list_records(name, version.seq, prefix=prefix, where=where)),
    )
    svg = b.pages.render("chart.svg", figure=charts.figure(summary, which)).encode()
    # asked for again at each use: a kept chart of a dataset the person may no longer read
    # (signed out, role removed) was shown for an hour without the server (caller74)
    return private_answer(request, strong_etag(svg), lambda: svg, "image/svg+xml")


@router.get("/thumbs/{name}/{seq}/{key:path}")
def thumbnail(request: Request, name: str, seq: int, key: str) -> Response:
    b, _, _ = _dataset(request, name)
    version = b.catalog.resolve(name, seq)
    record = b.catalog.get_record(name, version.seq, check_key(key))
    ref = record.ref
    try:
        # the URL names an immutable version; the object's URL, etag and size name the JPEG.
        # Kept by the browser, but asked for again at each use (datahub.web.revalidate): a week
        # of max-age showed a private dataset's thumbnails after Sign out (caller74)
        return private_answer(
            request,
            strong_etag(ref.url, ref.etag, ref.size, "thumb"),
            lambda: b.images.preview(ref, "thumb"),
            "image/jpeg",
        )
    except (ObjectChanged, ObjectNotFound, InvalidInput, StorageError) as exc:
        # the record exists but has no picture to show: say why in the picture, so a page of
        # thumbnails shows every record and its console stays clean
        svg = b.pages.render("no_preview.svg", reason=_NO_PREVIEW.get(exc.code, exc.code))
        headers = {"Cache-Control": "no-store", "X-Datahub-Error": exc.code}
        return Response(svg, media_type="image/svg+xml", headers=headers)


_NO_PREVIEW = {
    "object_changed": "changed at its origin",
    "object_not_found": "gone from its origin",
    "payload_too_large": "too large to preview",
    "invalid_input": "not an image",
}


# --- a diff -------------------------------------------------------------------------------------
@router.get("/datasets/{name}/diff", response_class=HTMLResponse)
def diff_page(
    request: Request,
    name: str,
    from_ref: Annotated[str, Query(alias="from")] = "",
    to: str = "latest",
    prefix: str = "",
    cursor: str = "",
) -> Response:
    b, _, _ = _dataset(request, name)
    versions = list(b.catalog.log(name))
    if not versions:
        # said only "no versions to compare yet", with no word of how a first one is made
        raise InvalidInput(
            f"dataset {name!r} has no versions to compare yet: create version 1 with {first_version(name)}",
            dataset=name,
        )
    new = b.catalog.resolve(name, to)
    if not from_ref:
        from_ref = str(new.parent or 0)
    old = None if from_ref in ("0", "v0") else b.catalog.resolve(name, from_ref)
    check_prefix(prefix)
    a = old.seq if old else 0
    added, removed, modified = b.counts.get(b.catalog, name, old, new)
    rows, last = diffs.page(b.catalog, name, a, new.seq, prefix=prefix, after=cursor_of(cursor), limit=PAGE)
    query = {"from": a, "to": new.seq, "prefix": prefix}
    more = None if last is None else "?" + urlencode({**query, "cursor": to_cursor(last)})
    first = _first_page(query) if cursor else None
    return render(
        request,
        "diff.html",
        title=f"{name}: v{a} → v{new.seq}",
        name=name,
        versions=versions,
        old=a,
        new=new.seq,
        prefix=prefix,
        counts={"added": added, "removed": removed, "modified": modified},
        rows=rows,
        more=more,
        first=first,
        is_image=is_image,
    )
