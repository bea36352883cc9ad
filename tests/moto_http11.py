"""moto's S3 app served over HTTP/1.1 keep-alive connections, for benchmarks.

Why: ``moto_server`` runs on werkzeug's development server, which answers every request
with ``Connection: close`` (werkzeug's own choice: Python's ``http.server`` cannot drain a
request body before the next request line). A client of it therefore opens one TCP
connection per request: a socket, a non-blocking connect, a poll and its socket options,
and a new connection object in its pool, on every GET. Real object stores (S3, Ceph RGW)
keep connections alive, and every S3 client here pools them, so a benchmark against
``moto_server`` charges each client (datahub's daemon and every baseline alike) a cost it
does not pay in production, in its CPU per object. This runs the same moto application
(``moto.server``'s ``DomainDispatcherApplication``) under uvicorn's HTTP/1.1 server (h11),
whose connections stay open between requests.

Access log: one line per request on stderr, ``127.0.0.1:PORT - "GET /bucket/key HTTP/1.1"
200``, which the request counters of the benches (``bench/peers/run_bench.py``
``RequestLog``) parse as they parse werkzeug's lines.

Not the same as ``moto_server`` in one respect: a request header whose name has an
underscore (an S3 metadata key such as ``x-amz-meta-a_b``) reaches moto with a dash
(WSGI folds them), where ``moto_server`` keeps the underscore. datahub writes no object
metadata; the test suite keeps ``moto_server``.

Usage (the arguments of ``moto_server``): ``python tests/moto_http11.py -H 127.0.0.1 -p 5000``
"""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-H", "--host", default="127.0.0.1")
    ap.add_argument("-p", "--port", type=int, required=True)
    args = ap.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        ap.error("loopback only")
    from moto_launch import exit_with_parent  # its sibling: run as a script, tests/ is on sys.path

    exit_with_parent()

    import uvicorn
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    app = DomainDispatcherApplication(create_backend_app)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        interface="wsgi",
        http="h11",
        log_config=None,  # the root logger above: plain lines, no colours
        access_log=True,
        timeout_keep_alive=60,  # an idle pooled connection stays usable between passes
    )


if __name__ == "__main__":
    main()
