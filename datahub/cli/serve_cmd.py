"""``datahub serve``: the HTTP API until Ctrl-C / SIGTERM."""

from __future__ import annotations

import argparse
from typing import Any

from datahub.config import Config
from datahub.console.context import CliContext


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the HTTP API (default 127.0.0.1:8080, local mode)")
    p.add_argument("--host", help="address to bind (default: api.host)")
    p.add_argument("--port", type=int, help="port (default: api.port)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--auth", dest="local_mode", action="store_false", default=None, help="require tokens")
    mode.add_argument(
        "--local", dest="local_mode", action="store_true", help="no authentication (loopback only)"
    )
    p.add_argument(
        "--no-labelx", dest="labelx", action="store_false", help="do not serve LabelX under /labelx"
    )
    p.set_defaults(func=run)


def build_app(config: Config, catalog: Any, stores: Any, *, labelx: bool = True) -> tuple[Any, Any]:
    """The datahub API with LabelX mounted under /labelx, both reading through one cache.

    Lives in the CLI layer, not in ``datahub.api``, because the library never imports labelx.
    Returns the app and the cache the caller must close after the server stops.
    """
    from datahub.api import create_app
    from datahub.cache import open_cache

    cache = open_cache(config, stores)
    app = create_app(config, catalog=catalog, stores=stores, cache=cache)
    if labelx:
        from labelx.app import create_labelx_app

        app.mount("/labelx", create_labelx_app(config, catalog=catalog, stores=stores, cache=cache))
    return app, cache


def run(args: argparse.Namespace, ctx: CliContext) -> int:
    from datahub.api.server import ApiServer, wait_for_signal

    api = ctx.config.api
    if args.host:
        api.host = args.host
    if args.port is not None:
        api.port = args.port
    if args.local_mode is not None:
        api.local_mode = args.local_mode
    app, cache = build_app(ctx.config, ctx.catalog, ctx.stores, labelx=args.labelx)
    ctx.service("cache", lambda: cache)
    server = ApiServer(app, ctx.config)  # refuses local mode off loopback, and busy ports
    server.start()
    mode = "local mode, no authentication" if api.local_mode else "bearer tokens required"
    print(f"datahub API on {server.url} ({mode}); docs at {server.url}/docs; Ctrl-C stops", file=ctx.err)
    if args.labelx:
        print(
            f"LabelX on {server.url}/labelx/ (users: datahub labelx create-user NAME --role admin)",
            file=ctx.err,
        )
    try:
        wait_for_signal()
    finally:
        server.stop()
    print("stopped", file=ctx.err)
    return 0
