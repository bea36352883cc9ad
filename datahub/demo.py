"""``make run``: the embedded default with a sample dataset, served on 127.0.0.1:8080.

What it does, as a list of steps (``STEPS``) that components extend:

0. listen    — reserve the API port first, so a busy port fails at once (not after setup);
1. prepare   — the state directory (``./var`` unless --home/--config say otherwise), held
               (``demo.lock``) while the demo runs: a second demo there refuses;
2. sample    — 300 deterministic JPEGs (10 classes x 30) and a manifest labelling them;
3. import    — import the manifest as dataset ``sample``, only if it has no version yet:
               a later run leaves the dataset as it is (never over the user's versions);
4. mount     — (fuse_adapter.demo_step) mount ``sample@latest`` and run a DataLoader epoch;
5. serve     — the HTTP API on 127.0.0.1:8080 (local mode: no tokens, loopback only), the
               dataset browser at its root and LabelX under /labelx/.

Then it prints the URLs and example CLI commands and waits for Ctrl-C / SIGTERM; every
step's cleanup (server, mounts …) runs in reverse order on the way out.

``--skip NAME`` leaves steps out (e.g. ``--skip mount`` where FUSE is unavailable).
A step is ``Step(name, run)`` where ``run(demo)`` may register cleanups on
``demo.cleanup`` (an ExitStack) and lines for the summary in ``demo.notes``.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import io
import json
import os
import shlex
import signal
import socket
import sys
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from datahub.config import Config, load_config
from datahub.console.context import create_home, shown
from datahub.console.programs import typed_path
from datahub.errors import (
    Conflict,
    DatahubError,
    DatasetNotFound,
    InvalidInput,
    NoSpace,
    StorageError,
    VersionNotFound,
)
from datahub.words import counted

DATASET = "sample"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
PER_CLASS = 30
IMAGE_SIZE = 64


@dataclass
class Demo:
    config: Config
    args: argparse.Namespace
    cleanup: ExitStack = field(default_factory=ExitStack)
    listener: socket.socket | None = None  # the API port, reserved by the "listen" step
    notes: list[str] = field(default_factory=list)
    serving: bool = False  # once the API answers, a signal means "stop cleanly", not "abort"
    stop: threading.Event = field(default_factory=threading.Event)
    _services: dict = field(default_factory=dict)

    def on_signal(self, signum: int, frame: object) -> None:
        """Installed before the first step, so no signal ever finds the default handler.

        Before the API serves, a signal aborts the steps (cleanup still runs); after, it
        ends the wait and the demo stops cleanly.
        """
        self.stop.set()
        if not self.serving:
            raise KeyboardInterrupt

    @property
    def sample_dir(self) -> Path:
        return self.config.home_path / "sample"

    @property
    def cli(self) -> str:
        """How a user types the CLI for this demo's state (``./.venv/bin/datahub --home ...``):
        after ``make run`` the venv is not on PATH, so a bare ``datahub`` is not found."""
        return cli_hint(self.config, self.args.config)

    @property
    def catalog(self):  # -> datahub.catalog.Catalog, opened once, closed at exit
        if "catalog" not in self._services:
            from datahub.catalog import open_catalog

            catalog = open_catalog(self.config.resolved_catalog_url, retry=self.config.catalog)
            self.cleanup.callback(catalog.close)
            self._services["catalog"] = catalog
        return self._services["catalog"]

    @property
    def stores(self):  # -> datahub.storage.StoreRegistry
        if "stores" not in self._services:
            from datahub.storage import StoreRegistry

            stores = StoreRegistry(self.config)
            self.cleanup.callback(stores.close)
            self._services["stores"] = stores
        return self._services["stores"]

    def say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Demo], None]


# --- steps ---------------------------------------------------------------------------------------
def listen(demo: Demo) -> None:
    from datahub.api.server import bind_socket, check_bind

    check_bind(demo.config)  # local mode only on loopback
    holder = running_demo(demo.config.home_path)  # said before "port busy": the likelier cause
    if holder is not None:
        raise _second_demo(demo.config.home_path, holder)
    # make run passes no arguments: the setting's variable is how its user moves the port
    demo.listener = bind_socket(
        demo.config.api.host,
        demo.config.api.port,
        other_port="DATAHUB_API_PORT=9090 make run, or .venv/bin/python -m datahub.demo --port 9090",
    )
    demo.cleanup.callback(demo.listener.close)


def prepare(demo: Demo) -> None:
    create_home(
        demo.config, choose="DATAHUB_HOME=DIR make run, or .venv/bin/python -m datahub.demo --home DIR"
    )
    claim_home(demo)
    demo.say(f"[prepare] state in {demo.config.home_path} (catalog {demo.config.resolved_catalog_url})")


DEMO_LOCK = "demo.lock"  # under the home: held (flock) by the demo running there, with its pid and URL


def running_demo(home: Path) -> dict | None:
    """The demo running in ``home`` (its lock file's ``{"pid", "url"}``, ``{}`` if not written
    yet), or None when none runs there. A probe: it creates nothing."""
    try:
        fd = os.open(home / DEMO_LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                found = json.loads(os.read(fd, 4096) or b"{}")
            except ValueError:
                found = {}
            return found if isinstance(found, dict) else {}
        return None  # a file a stopped (or killed) demo left: nobody holds it
    finally:
        os.close(fd)


def _second_demo(home: Path, holder: dict) -> Conflict:
    pid = holder.get("pid") or "?"
    url = f", serving {holder['url']}" if holder.get("url") else ""
    return Conflict(
        f"a demo is already running in {home} (process {pid}{url}): a second one there would unmount "
        f"its {home / 'mnt'} and share its catalog; use that one, or stop it first (Ctrl-C in its "
        f"terminal, or kill {pid}), or run this one with another home: DATAHUB_HOME=DIR make run "
        "(or .venv/bin/python -m datahub.demo --home DIR)",
        home=str(home),
        pid=holder.get("pid"),
    )


def claim_home(demo: Demo) -> None:
    """Hold the home's lock for as long as this demo runs, or refuse: another demo runs there.

    Why: the mount step unmounts a leftover at ``<home>/mnt`` (a killed demo's daemon) before it
    mounts, and a second demo in the same home took the first one's live mount for a leftover
    and unmounted it under its DataLoader and its users. A killed demo's lock is released by the
    kernel, so a leftover is still cleaned up."""
    home = demo.config.home_path
    path = home / DEMO_LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _second_demo(home, running_demo(home) or {}) from None
        try:  # the last holder may have removed the file between our open and flock: lock anew
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    serving = "serve" not in demo.args.skip
    # the port the listen step bound (``--port 0``: the kernel's choice), else the setting's
    port = demo.listener.getsockname()[1] if demo.listener is not None else demo.config.api.port
    host = f"[{demo.config.api.host}]" if ":" in demo.config.api.host else demo.config.api.host
    url = f"http://{host}:{port}/" if serving else None
    os.ftruncate(fd, 0)
    os.write(fd, (json.dumps({"pid": os.getpid(), "url": url}) + "\n").encode())

    def release() -> None:  # removed while held, so nothing is left behind in the home
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.close(fd)

    demo.cleanup.callback(release)


def render_image(class_index: int, n: int) -> bytes:
    """A small deterministic JPEG: a class-coloured background with an index-dependent shape."""
    from PIL import Image, ImageDraw

    hue = (class_index * 25) % 256
    img = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), (hue, 255 - hue, (n * 8) % 256))
    draw = ImageDraw.Draw(img)
    x0, y0 = (n * 7) % 32, (n * 13) % 32
    draw.ellipse((x0, y0, x0 + 24 + class_index, y0 + 24), fill=(255 - hue, (n * 5) % 256, hue))
    draw.rectangle((0, 0, IMAGE_SIZE - 1, 3 + class_index), fill=(class_index * 20, 0, 0))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=85)
    return out.getvalue()


def _write_if_changed(path: Path, data: bytes) -> bool:
    """Atomic write, skipped when the file already holds ``data`` (keeps etags, so re-runs are no-ops)."""
    if path.exists() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return True


def generate_sample(demo: Demo) -> None:
    images = demo.sample_dir / "images"
    lines, written = [], 0
    for c, name in enumerate(CLASSES):
        for n in range(PER_CLASS):
            path = images / name / f"{n:04d}.jpg"
            written += _write_if_changed(path, render_image(c, n))
            split = "val" if n % 10 == 0 else "train"
            lines.append(
                json.dumps(
                    {
                        "url": path.as_uri(),
                        "key": f"{split}/{name}/{n:04d}.jpg",
                        "labels": {"class": name},
                        "meta": {"split": split},
                    },
                    sort_keys=True,
                )
            )
    _write_if_changed(demo.sample_dir / "manifest.jsonl", ("\n".join(lines) + "\n").encode())
    total = len(CLASSES) * PER_CLASS
    demo.say(f"[sample] {total} JPEGs in {images} ({written} written, {total - written} already there)")


def import_sample(demo: Demo) -> None:
    """Import the sample once: only while ``sample`` has no version yet.

    A later run never imports again, since the manifest would be committed over whatever the
    user made since (a CLI relabel, a LabelX commit) and undo it at ``latest``; it says what
    is there and how to import again on purpose."""
    from datahub.ingest import import_source

    try:
        head = demo.catalog.resolve(DATASET, "latest")
    except (DatasetNotFound, VersionNotFound):
        head = None
    if head is not None:
        manifest = demo.sample_dir / "manifest.jsonl"
        demo.say(
            f"[import] {DATASET} exists (latest v{head.seq}, {counted(head.record_count, 'record')}): left as it is, "
            f"not imported again, so your versions stay; to import the sample on purpose: "
            f"{demo.cli} import {manifest} --to {DATASET}"
        )
        return
    report = import_source(
        demo.catalog,
        demo.config,
        demo.stores,
        str(demo.sample_dir / "manifest.jsonl"),
        DATASET,
        message="sample images generated by make run",
        author="demo",
    )
    if report.version is None:
        demo.say(f"[import] {DATASET}@v{report.base} is up to date; reused, no new version")
    else:
        demo.say(
            f"[import] committed {DATASET}@v{report.version.seq} "
            f"({report.added} added, {report.removed} removed, {report.modified} modified)"
        )


def serve_api(demo: Demo) -> None:
    from datahub.api.server import ApiServer
    from datahub.cli.serve_cmd import build_app, pages_name_commands_as_typed

    app, cache = build_app(demo.config, demo.catalog, demo.stores)
    # the pages' "Mount it" and LabelX's dashboard run as shown (the venv is not on PATH), and
    # their PyTorch script: run by the venv's python, on this demo's home and catalog
    pages_name_commands_as_typed(
        app,
        demo.cli,
        home=str(demo.config.home_path),
        config_file=_config_file(demo.args.config),
        catalog_url=demo.config.catalog_url or None,
    )
    demo.cleanup.callback(cache.close)
    server = ApiServer(app, demo.config, sock=demo.listener)
    # Before start, not after: /healthz may answer (and a caller send SIGTERM) before start()
    # returns, and that signal must stop the demo cleanly, not abort it mid-step.
    demo.serving = True
    demo.cleanup.callback(server.stop)
    server.start()
    base = server.url
    login = labelx_admin(demo.config)
    demo.say(f"[serve] API on {base} ({'local mode' if demo.config.api.local_mode else 'tokens required'})")
    demo.notes += [
        "URLs:",
        f"  {base}/                          (dataset browser: versions, records, diffs, lineage)",
        f"  {base}/datasets/{DATASET}/versions/latest",
        f"  {base}/healthz",
        f"  {base}/docs                      (OpenAPI UI)",
        f"  {base}/v1/datasets",
        f"  {base}/v1/datasets/{DATASET}/versions/latest/records?limit=5",
        f"  {base}/v1/datasets/{DATASET}/versions/1/export   (NDJSON)",
        f"  {base}/labelx/                   (LabelX: user admin, "
        + (
            f"password in {login})"
            if login
            else f"the password set with {demo.cli} labelx set-password admin)"
        ),
    ]


def labelx_admin(config: Config) -> Path | None:
    """Create LabelX's first admin once, with a random password kept in a 0600 file under home;
    the file while it holds admin's password, else None (and the file is gone).

    Why: once ``datahub labelx set-password admin`` (or ``disable-user``) replaced it, the file
    stayed, and the login page and this demo's summary sent people to a password that no longer
    opened the account; removed, a later run made a new file, for an account it did not make."""
    import secrets

    from labelx.auth import hash_password, verify_password
    from labelx.deps import demo_password_path, labelx_db_path
    from labelx.store import LabelStore

    secret = demo_password_path(config)
    store = LabelStore(labelx_db_path(config))
    try:
        found = store.user_with_hash("admin")
        if found is None:
            if not secret.exists():
                fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(secrets.token_urlsafe(12) + "\n")
            store.create_user("admin", "admin", hash_password(secret.read_text().strip()))
            return secret
        if secret.exists() and verify_password(secret.read_text().strip(), found[1]):
            return secret
        secret.unlink(missing_ok=True)
        return None
    finally:
        store.close()


def mount_sample(demo: Demo) -> None:
    """FUSE-mount sample@latest read-only and run a torch DataLoader epoch over it (fuse_adapter)."""
    from fuse_adapter.demo_step import mount_and_epoch

    mount_and_epoch(demo)


STEPS: list[Step] = [
    Step("listen", listen),
    Step("prepare", prepare),
    Step("sample", generate_sample),
    Step("import", import_sample),
    Step("mount", mount_sample),
    Step("serve", serve_api),
]


def _config_file(given: str | None) -> str | None:
    """The demo's ``--config FILE`` as an absolute path (the commands it prints may be run from
    another directory), or None."""
    return str(Path(given).resolve()) if given else None


def cli_hint(config: Config, config_file: str | None = None) -> str:
    """The CLI as this demo's user types it, on this demo's state: its home, and the
    configuration file it was given (``--config``): without it, the printed commands read
    another catalog than the demo's when that file names one (newuser24)."""
    exe = typed_path(Path(sys.executable).with_name("datahub"))
    where = f" --config {shlex.quote(_config_file(config_file) or '')}" if config_file else ""
    return f"{exe}{where} --home {shlex.quote(str(config.home_path))}"


def example_commands(config: Config, config_file: str | None = None) -> list[str]:
    dh = cli_hint(config, config_file)
    return [
        "Try:",
        f"  {dh} dataset list",
        f"  {dh} log {DATASET}",
        f"  {dh} ls {DATASET}@v1 --filter labels.class=cat",
        f"  {dh} diff {DATASET} 0 1 | head",
        f"  {dh} tag {DATASET} golden 1",
        f"  {dh} export {DATASET}@golden > /tmp/{DATASET}.ndjson",
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m datahub.demo", description=__doc__.split("\n")[0].replace("``", "")
    )
    p.add_argument("--config", help="TOML configuration (default: $DATAHUB_CONFIG or ./datahub.toml)")
    p.add_argument("--home", help="state directory (default: ./var)")
    p.add_argument("--host", help="API address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="API port (default 8080)")
    p.add_argument("--no-wait", action="store_true", help="run the steps, print, and exit (no Ctrl-C wait)")
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="STEP",
        help=f"leave a step out: {', '.join(s.name for s in STEPS)}",
    )
    return p.parse_args(argv)


def _select(steps: list[Step], skip: list[str]) -> list[Step]:
    unknown = set(skip) - {s.name for s in steps}
    if unknown:
        raise InvalidInput(
            f"unknown step(s) {', '.join(sorted(unknown))} for --skip; steps: {', '.join(s.name for s in steps)}"
        )
    return [s for s in steps if s.name not in skip]


# what to do about a step's OSError, by errno: the home is where make run writes
_HOME_FIX = (
    "or run it with another home: DATAHUB_HOME=DIR make run (or .venv/bin/python -m datahub.demo --home DIR)"
)
_OS_FIXES = {
    errno.ENOSPC: ("no space left on device", f"free space there, {_HOME_FIX}"),
    errno.EDQUOT: ("disk quota exceeded", f"free space there, {_HOME_FIX}"),
    errno.EACCES: ("permission denied", f"make it writable, {_HOME_FIX}"),
    errno.EROFS: ("read-only file system", _HOME_FIX.removeprefix("or ")),
}


def _step_failed(name: str, exc: OSError, config: Config) -> DatahubError:
    """A step's OSError as one line naming the step, the path and what to do. Why: a full or
    read-only home (a small /var, a container's overlay) is a new user's likeliest failure,
    and it came out as Python's traceback of ``OSError: [Errno 28]``."""
    what, fix = _OS_FIXES.get(exc.errno or 0, (exc.strerror or str(exc), ""))
    where = exc.filename or config.home_path
    cls = NoSpace if exc.errno in (errno.ENOSPC, errno.EDQUOT) else StorageError
    text = f"make run's step {name!r} failed: {what} ({where}; state in {config.home_path})"
    if not fix:  # not a state the user can fix by choice of home: say so, and how to see more
        fix = f"{type(exc).__name__} [errno {exc.errno}]: {exc}; if that file system is fine, report it"
    return cls(f"{text}: {fix}")


def main(argv: list[str] | None = None, steps: list[Step] | None = None) -> int:
    args = parse_args(argv)
    overrides: dict = {"home": args.home} if args.home else {}
    try:
        config = load_config(args.config, overrides=overrides)
        if args.host:
            config.api.host = args.host
        if args.port is not None:
            config.api.port = args.port
        chosen = _select(steps or STEPS, args.skip)
        demo = Demo(config, args)
        # SIGHUP: the terminal closed; its default killed the demo with no cleanup, leaving
        # the mount daemon (a session of its own) mounted at var/mnt
        stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {s: signal.signal(s, demo.on_signal) for s in stops}
        try:
            with demo.cleanup:
                for step in chosen:
                    try:
                        step.run(demo)
                    except OSError as exc:
                        raise _step_failed(step.name, exc, config) from exc
                print("\n".join(["", *demo.notes, *example_commands(config, args.config), ""]), flush=True)
                if not args.no_wait:
                    print("Ctrl-C stops the demo.", flush=True)
                    while not demo.stop.wait(0.5):
                        pass
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        print("demo stopped cleanly", flush=True)
        return 0
    except DatahubError as exc:
        print(f"error: {shown(exc.message)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted; nothing half-committed (rerun to continue)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
