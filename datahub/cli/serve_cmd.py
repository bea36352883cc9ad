"""``datahub serve``: the HTTP API until Ctrl-C / SIGTERM / SIGHUP."""

from __future__ import annotations

import argparse
import shlex
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from datahub.console.context import CliContext, as_typed
from datahub.console.programs import python_hint

if TYPE_CHECKING:
    from datahub.config import Config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the HTTP API (default 127.0.0.1:8080, local mode)")
    p.add_argument("--host", help="address to bind (default: api.host)")
    p.add_argument("--port", type=int, help="port (default: api.port)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--auth", dest="local_mode", action="store_false", default=None, help="require tokens")
    mode.add_argument(
        "--local", dest="local_mode", action="store_true", help="no authentication (loopback only)"
    )
    labelx = p.add_mutually_exclusive_group()
    # --labelx, the default said: a user who reads --no-labelx types it, and was told
    # "unrecognized arguments" (newuser31)
    labelx.add_argument(
        "--labelx",
        dest="labelx",
        action="store_true",
        default=True,
        help="serve LabelX under /labelx (default)",
    )
    labelx.add_argument(
        "--no-labelx", dest="labelx", action="store_false", help="do not serve LabelX under /labelx"
    )
    p.add_argument(
        "--secure-cookies",
        action="store_true",
        help="mark the browser's and LabelX's sign-in cookies Secure: pages served over https by a "
        "TLS proxy that reaches this server over http (api.secure_cookies)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="serve from N processes on one socket (default 1; about one per core; see docs/api.md)",
    )
    p.set_defaults(func=run, creates_catalog=True)


def build_app(config: Config, catalog: Any, stores: Any, *, labelx: bool = True) -> tuple[Any, Any]:
    """The datahub API, the dataset browser at ``/`` and LabelX under /labelx, all reading
    through one cache.

    Lives in the CLI layer, not in ``datahub.api``, because the library never imports labelx.
    Returns the app and the cache the caller must close after the server stops; a failure
    on the way closes it here (left open, the next start rebuilt its index as after a crash).
    """
    from datahub.api import create_app
    from datahub.browser import mount_browser
    from datahub.cache import open_cache

    cache = open_cache(config, stores)
    try:
        app = create_app(config, catalog=catalog, stores=stores, cache=cache)
        mount_browser(app, cache=cache, stores=stores, labelx=labelx)
        if labelx:
            from labelx.app import create_labelx_app

            # the API's body limits bound LabelX's bodies too (their caller unproven: its own budget)
            labelx_app = create_labelx_app(
                config, catalog=catalog, stores=stores, cache=cache, limit_bodies=False
            )
            app.mount("/labelx", labelx_app)
    except BaseException:
        cache.close()
        raise
    return app, cache


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.api.record_urls import server_sources
    from datahub.api.routes.system import metrics_readers
    from datahub.api.server import ApiServer, bind_socket, check_bind, stop_signals
    from datahub.api.workers import check_workers, serve_workers

    api = ctx.config.api
    if args.host:
        api.host = args.host
    if args.port is not None:
        api.port = args.port
    if args.local_mode is not None:
        api.local_mode = args.local_mode
    if args.secure_cookies:
        api.secure_cookies = True
    workers = check_workers(args.workers)
    check_bind(ctx.config)  # before anything listens: local mode only on loopback
    # create_app checks it too, but in each process after the cache is open and the line below
    # said the server runs: a bad setting printed that line, left the cache unclosed (the next
    # start rebuilt its index) and, with --workers, restarted dying workers (platform14)
    server_sources(ctx.config.api.commit_sources)
    metrics_readers(ctx.config.api.metrics_principals)  # the same, for /metrics' readers (sec25)
    # A busy port is one clear error, before any fork. With several workers this socket only
    # holds the port: each worker listens on its own SO_REUSEPORT socket, so the kernel
    # spreads connections evenly instead of waking every worker for each one.
    sock = bind_socket(api.host, api.port)
    port = sock.getsockname()[1]
    if workers > 1:  # a plain bind first: a reuse-port bind would join someone else's group
        sock.close()
        sock = bind_socket(api.host, port, reuse_port=True, listen=False)

    def serve_one(held) -> int:
        """One server process: its own socket, catalog connection, stores and cache, opened here."""
        sock = held if workers == 1 else bind_socket(api.host, port, reuse_port=True)
        try:
            app, cache = build_app(ctx.config, ctx.catalog, ctx.stores, labelx=args.labelx)
            ctx.service("cache", lambda: cache)
            config_file = getattr(args, "config", None)
            pages_name_commands_as_typed(
                app,
                ctx.command,
                home=str(ctx.config.home_path),
                config_file=str(Path(config_file).resolve()) if config_file else None,
                catalog_url=ctx.config.catalog_url or None,
            )
            server = ApiServer(app, ctx.config, sock=sock)
            # SIGHUP too: closing the terminal killed it with its cache never closed
            with stop_signals((signal.SIGINT, signal.SIGTERM, signal.SIGHUP)) as wait:
                server.start()
                try:
                    if workers == 1:
                        announce()
                    wait()
                finally:
                    server.stop()
        finally:
            ctx.close()
        return 0

    def announce() -> None:
        """Where the server is. Why not before the app is built: a catalog that would not open
        (MongoDB unreachable, an SQLite path under /proc, a home it cannot make) printed "datahub
        API on URL … Ctrl-C stops", then the error, so a server seemed to run (newuser36). With
        one process it is said once serving; several workers each open their own catalog."""
        url = _url(api.host, port)
        mode = "local mode, no authentication" if api.local_mode else "bearer tokens required"
        shape = f"{workers} worker processes" if workers > 1 else "one process"
        # the browser first: it is what a person opens (this line named only the API and its docs)
        print(
            f"datahub API on {url} ({mode}, {shape}); dataset browser at {url}/, API docs at {url}/docs; "
            "Ctrl-C stops",
            file=ctx.err,
        )
        if args.labelx:
            # as the user runs datahub: after make run, "datahub …" is "command not found" (newuser28)
            create = as_typed(
                f"`datahub{_labelx_location(args, ctx)} labelx create-user NAME --role admin`", ctx.command
            )
            print(f"LabelX on {url}/labelx/ (users: {create})", file=ctx.err)
        ctx.err.flush()

    if workers == 1:
        code = serve_one(sock)
    else:
        announce()
        try:
            code = serve_workers(workers, sock, serve_one)
        finally:
            sock.close()
    print("stopped", file=ctx.err)
    return code


def _labelx_location(args: argparse.Namespace, ctx: CliContext) -> str:
    """The options a ``labelx create-user`` line needs to reach this server's labelx.db and
    catalog from any directory: the home (absolute, quoted: a home with a space split the
    command in two, newuser31) once a location option was given, and the catalog and the
    configuration file given. Why: under ``serve --catalog URL`` without ``--home`` the line
    named no home, so typed in another directory it made the user in that directory's
    ./var/labelx.db, which this server never reads; and one naming ``--home`` dropped the
    ``--catalog`` and ``--config`` the server ran with (newuser36)."""
    catalog, config_file = getattr(args, "catalog", None), getattr(args, "config", None)
    if not (getattr(args, "home", None) or catalog or config_file):
        return ""  # ./var here, as the server's: the line is typed where serve was
    words = [] if config_file is None else ["--config", str(Path(config_file).resolve())]
    words += [] if catalog is None else ["--catalog", catalog]
    words += ["--home", str(ctx.config.home_path)]
    return " " + shlex.join(words)


def pages_name_commands_as_typed(
    app: Any,
    command: str,
    *,
    home: str | None = None,
    config_file: str | None = None,
    catalog_url: str | None = None,
) -> None:
    """The commands the pages show (the browser's "Mount it" and empty list, LabelX's
    dashboard) written as this user runs datahub (``invoked_as``), as this command's own lines
    and errors are: ``.venv/bin/datahub --home var serve`` served pages that said ``datahub
    mount …``, "command not found" where the venv is not on PATH (newuser32).

    The version page's PyTorch script likewise: run by the python that runs this server
    (``python_hint``), on this server's ``home`` and ``config_file`` when given, as ``make
    run``'s is. It said ``python train.py`` over ``load_config()``: no datahub to import where
    the venv is not on PATH, and the reader's default home (./var where they stand), not the
    catalog the page showed (newuser33). And on ``catalog_url``, the catalog this server reads
    (``--catalog URL``, ``DATAHUB_CATALOG_URL``, a file's ``catalog_url``) when one is set: the
    script opened the home's ``catalog.db`` instead, where the page's dataset is not (newuser34)."""
    app.state.browser.cli = command
    app.state.browser.python = python_hint()
    if home is not None:
        app.state.browser.home = home
    if config_file is not None:
        app.state.browser.config_file = config_file
    if catalog_url is not None:
        app.state.browser.catalog_url = catalog_url
    labelx = next((r.app for r in app.routes if getattr(r, "path", "") == "/labelx"), None)
    if labelx is not None:
        labelx.state.labelx.cli = command


def _url(host: str, port: int) -> str:
    """The URL to print for a bind: a wildcard bind (0.0.0.0, ::) is no address anyone can
    open, so the machine's own name stands for it (what other machines use)."""
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
