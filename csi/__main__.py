"""``python -m csi``: the datahub CSI plugin (node, controller, or both in one process).

    python -m csi --endpoint unix:///csi/csi.sock --node-id $NODE_NAME \\
        --state-dir /var/lib/datahub-csi --config /etc/datahub/datahub.toml --mode node

The Config (datahub TOML + ``DATAHUB_*`` variables) is the plugin's: storage and catalog
credentials live here or arrive as NodePublish secrets, never in a pod. On SIGTERM the
plugin stops serving but leaves published volumes mounted: pods keep their data across a
plugin restart, and the next start checks and repairs every recorded target.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import stat
import sys
import tempfile
import threading
from pathlib import Path

from datahub.config import load_config
from datahub.errors import DatahubError

DRIVER_NAME = "csi.datahub.dev"


def _seconds(text: str) -> float:
    """A positive number of seconds. Why refused at start: ``--check-interval 0`` made the
    supervisor check every mount in a busy loop (a core of the node), and a non-positive
    timeout failed every mount or flush."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m csi",
        description="datahub CSI plugin (gRPC on a unix socket)",
    )
    p.add_argument("--endpoint", default=os.environ.get("CSI_ENDPOINT", "unix:///csi/csi.sock"),
                   help="the socket the sidecars and the kubelet call (default: %(default)s; $CSI_ENDPOINT)")  # fmt: skip
    p.add_argument("--node-id", default=os.environ.get("NODE_ID") or socket.gethostname(),
                   help="this node's name, NodeGetInfo's answer (default: %(default)s; $NODE_ID, else the host name)")  # fmt: skip
    p.add_argument(
        "--state-dir",
        default="/var/lib/datahub-csi",
        help="published-volume state, mounts, logs (default: %(default)s)",
    )
    p.add_argument(
        "--kubelet-dir",
        default="/var/lib/kubelet",
        help="the kubelet's root dir: targets and staging paths outside it are refused (default: %(default)s)",
    )
    p.add_argument("--config", help="datahub TOML configuration (default: $DATAHUB_CONFIG)")
    p.add_argument("--mode", choices=("node", "controller", "all"), default="all",
                   help="which CSI services to serve: the DaemonSet's node, the Deployment's controller (default: %(default)s)")  # fmt: skip
    p.add_argument("--driver-name", default=DRIVER_NAME, help="the CSIDriver's name (default: %(default)s)")
    p.add_argument(
        "--check-interval",
        type=_seconds,
        default=10.0,
        help="seconds between mount health checks (default: %(default)s)",
    )
    p.add_argument(
        "--mount-timeout",
        type=_seconds,
        default=120.0,
        help="seconds a mount may take to start (default: %(default)s)",
    )
    p.add_argument(
        "--unmount-timeout",
        type=_seconds,
        default=600.0,
        help="seconds a workspace flush may take, per volume (default: %(default)s)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging of the plugin itself")
    return p


def _kubelet_dir_problem(path: str) -> str | None:
    """Why ``--kubelet-dir`` cannot be the kubelet's root dir, or None. Why at start: a node
    plugin given a path that does not exist (a typo, MicroK8s' dir on a stock node) started
    quietly and then refused every publish as "outside the kubelet's directory"; the kubelet
    makes its root dir before it runs any pod, so the plugin's DaemonSet always finds it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "no such directory"
    except OSError as exc:
        return exc.strerror or str(exc)
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    return None


def _state_dir_problem(path: str) -> str | None:
    """Why ``--state-dir`` cannot hold the node plugin's state, or None; it is made here if
    missing, as the plugin would. Why at start: one it could not make or write (a typo under
    ``/proc``, a read-only host path, a file) ended the plugin in a Python traceback from
    ``mkdir`` (newuser36), or would have refused every publish at its first write."""
    state = Path(path)
    if state.exists() and not state.is_dir():
        return "not a directory"
    try:
        state.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe.", dir=state)
    except OSError as exc:
        return f"cannot be made or written ({exc.strerror or type(exc).__name__})"
    os.close(fd)
    os.unlink(probe)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.mode in ("node", "all") and (problem := _kubelet_dir_problem(args.kubelet_dir)):
        parser.error(
            f"argument --kubelet-dir: {args.kubelet_dir}: {problem}; give the kubelet's --root-dir "
            "(where it makes pods/<uid>/volumes/…; /var/snap/microk8s/common/var/lib/kubelet on "
            "MicroK8s): the node plugin refuses every target and staging path outside it"
        )
    if args.mode in ("node", "all") and (problem := _state_dir_problem(args.state_dir)):
        parser.error(
            f"argument --state-dir: {args.state_dir}: {problem}; give a directory this user may "
            "write (the node plugin keeps its volumes' records and mounts there: a hostPath of the node)"
        )
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from csi.controller import ControllerService
    from csi.node import NodeService
    from csi.server import serve

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        config = load_config(args.config)
        node = None
        if args.mode in ("node", "all"):
            node = NodeService(
                config,
                Path(args.state_dir),
                args.node_id,
                mount_timeout=args.mount_timeout,
                unmount_timeout=args.unmount_timeout,
                kubelet_dir=args.kubelet_dir,
            )
            threading.Thread(
                target=node.supervise, args=(args.check_interval, stop), name="csi-supervisor", daemon=True
            ).start()
        controller = None
        if args.mode in ("controller", "all"):
            from csi.volume_records import open_volume_records
            from datahub.catalog import open_catalog

            catalog_url = config.resolved_catalog_url
            controller = ControllerService(
                open_volume_records(catalog_url),
                catalog=lambda: open_catalog(catalog_url, retry=config.catalog),
            )
        serve(args.endpoint, name=args.driver_name, node=node, controller=controller, stop=stop)
    except DatahubError as exc:
        logging.getLogger("csi").error("%s", exc.message)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
