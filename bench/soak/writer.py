"""A writer in a node's write-back workspace mount: create, write, fsync, rename, delete.

Run inside the node's namespace by the soak (``python -m bench.soak.writer``). The harness
commits the workspace as a version every cycle: it asks the writer to pause through a
control file (``{"cycle": N, "run": bool}``), the writer logs ``paused``, the harness
unmounts (which commits) and mounts the next cycle's workspace at the same path.

The event log is the history the checker rebuilds each file's allowed contents from: an
``intent`` before an operation, an ``ack`` (fsync'd before going on) for every close() or
fsync() that returned, and a ``fail`` with the errno for every one that did not. A path an
operation failed on is never touched again in that cycle (its state is uncertain: the
checker allows each state it could be in, never other bytes).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import os
import random
import time
from pathlib import Path

from bench.soak.errors import classify
from bench.soak.events import EventLog, Inflight


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Writer:
    def __init__(self, node: str, root: Path, log: EventLog, inflight: Inflight, seed: int) -> None:
        self.node, self.root, self.log, self.inflight = node, root, log, inflight
        self._fd: int | None = None
        self.seed = seed
        self.cycle = -1
        self.rng = random.Random(seed)
        self.certain: dict[str, str] = {}  # path -> sha of the acknowledged contents (files we may touch)
        self.serial = 0

    def root_fd(self) -> int:
        """The workspace mount's root, held open as a pod's bind mount holds it.

        Why: between a killed daemon's detach and the new daemon's mount the mount point is
        a bare directory on the node's disk; a writer going by path would write there, and
        its acknowledgements would be the local disk's, not the workspace's. A held
        directory descriptor answers ENOTCONN instead, and is taken again only once the
        path is a mount point (another device than its parent) again.
        """
        if self._fd is None:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
            if os.fstat(fd).st_dev == os.stat(self.root.parent).st_dev:
                os.close(fd)
                raise OSError(errno.ENOTCONN, f"{self.root} is not mounted (between two daemons)")
            self._fd = fd
        return self._fd

    def drop_fd(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def start_cycle(self, cycle: int) -> None:
        self.drop_fd()  # the next cycle is another workspace mount
        self.cycle = cycle
        self.rng = random.Random(f"{self.seed}-{self.node}-{cycle}")
        self.certain = {}
        self.serial = 0

    def _event(self, op: str, path: str, *, durable: bool = False, **kw: object) -> None:
        self.log.write(
            {"node": self.node, "cycle": self.cycle, "op": op, "path": path, **kw}, durable=durable
        )

    def _fail(self, path: str, stage: str, exc: BaseException) -> None:
        self._event("fail", path, durable=True, stage=stage, err=classify(exc))
        self._lost_mount(exc)
        self.certain.pop(path, None)

    def _lost_mount(self, exc: BaseException) -> None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOTCONN, errno.ECONNABORTED):
            self.drop_fd()  # the daemon is gone: take the mount point again once it serves

    def step(self) -> None:
        roll = self.rng.random()
        if roll < 0.5 or len(self.certain) < 3:
            self.serial += 1
            self.write_file(f"f/n{self.serial:05d}.bin", new=True)
        elif roll < 0.62:
            self.write_file(self.rng.choice(sorted(self.certain)), new=False)
        elif roll < 0.77:
            self.rename(self.rng.choice(sorted(self.certain)))
        elif roll < 0.87:
            self.delete(self.rng.choice(sorted(self.certain)))
        else:
            self.read_back(self.rng.choice(sorted(self.certain)))

    def write_file(self, rel: str, *, new: bool) -> None:
        size = self.rng.choice(
            [0, 1, 100, 4096, self.rng.randint(1, 300_000), self.rng.randint(1, 1_200_000)]
        )
        data = self.rng.randbytes(size)
        cut = self.rng.randint(0, size) if self.rng.random() < 0.4 else None
        prefix = data[:cut] if cut is not None else None
        self._event(
            "intent",
            rel,
            durable=True,
            kind="create" if new else "overwrite",
            sha=sha(data),
            prefix=sha(prefix) if prefix is not None else None,
        )
        stage = "open"
        self.inflight.begin(f"write {rel}")
        try:
            root = self.root_fd()
            with contextlib.suppress(FileExistsError):
                os.mkdir(rel.rsplit("/", 1)[0], dir_fd=root)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            with os.fdopen(os.open(rel, flags, 0o644, dir_fd=root), "wb") as fh:
                if prefix is not None:
                    stage = "write"
                    fh.write(prefix)
                    stage = "fsync"
                    fh.flush()
                    os.fsync(fh.fileno())
                    self._event("ack", rel, durable=True, sha=sha(prefix), at="fsync")
                stage = "write"
                fh.write(data[len(prefix) if prefix is not None else 0 :])
                stage = "close"
            self._event("ack", rel, durable=True, sha=sha(data), at="close")
            self.certain[rel] = sha(data)
        except Exception as exc:  # every failure is logged with its kind; the path is dropped
            self._fail(rel, stage, exc)
        finally:
            self.inflight.end()

    def rename(self, src: str) -> None:
        self.serial += 1
        dst = f"f/r{self.serial:05d}.bin"
        self._event("intent", src, durable=True, kind="rename", to=dst)
        self.inflight.begin(f"rename {src}")
        try:
            root = self.root_fd()
            os.rename(src, dst, src_dir_fd=root, dst_dir_fd=root)
        except Exception as exc:
            self._event("fail", src, durable=True, stage="rename", to=dst, err=classify(exc))
            self._lost_mount(exc)
            self.certain.pop(src, None)
        else:
            self._event("ack", src, durable=True, at="rename", to=dst)
            self.certain[dst] = self.certain.pop(src)
        finally:
            self.inflight.end()

    def delete(self, rel: str) -> None:
        self._event("intent", rel, durable=True, kind="delete")
        self.inflight.begin(f"delete {rel}")
        try:
            os.unlink(rel, dir_fd=self.root_fd())
        except Exception as exc:
            self._fail(rel, "unlink", exc)
        else:
            self._event("ack", rel, durable=True, at="unlink")
            self.certain.pop(rel)
        finally:
            self.inflight.end()

    def read_back(self, rel: str) -> None:
        """Reads see acknowledged writes: a read of a certain file returns its bytes or an error."""
        t0 = time.monotonic()
        self.inflight.begin(f"read {rel}")
        event: dict = {"node": self.node, "via": "workspace", "ds": "workspace", "key": rel}
        try:
            with os.fdopen(os.open(rel, os.O_RDONLY, dir_fd=self.root_fd()), "rb") as fh:
                data = fh.read()
        except Exception as exc:
            event.update(ok=False, err=classify(exc))
            self._lost_mount(exc)
        else:
            good = sha(data) == self.certain[rel]
            event.update(ok=good, bytes=len(data), wrong=not good)
        finally:
            self.inflight.end()
        event["dt"] = round(time.monotonic() - t0, 4)
        self.log.write(event)


def _control(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {"cycle": -1, "run": False}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", required=True)
    ap.add_argument("--root", required=True, help="the workspace mount point")
    ap.add_argument("--control", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--inflight", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--until", type=float, required=True)
    args = ap.parse_args(argv)
    log = EventLog(Path(args.events))
    writer = Writer(args.node, Path(args.root), log, Inflight(Path(args.inflight)), args.seed)
    control = Path(args.control)
    paused = None
    while time.time() < args.until:
        ctl = _control(control)
        if not ctl["run"] or ctl["cycle"] != writer.cycle:
            if paused != writer.cycle:
                log.write({"node": args.node, "cycle": writer.cycle, "op": "paused"}, durable=True)
                paused = writer.cycle
                control.with_suffix(".paused").write_text(str(writer.cycle))
            if ctl["run"]:
                writer.start_cycle(ctl["cycle"])
                paused = None
                continue
            time.sleep(0.05)
            continue
        writer.step()
        time.sleep(0.01)
    log.write({"node": args.node, "cycle": writer.cycle, "op": "paused", "done": True}, durable=True)
    control.with_suffix(".paused").write_text("done")  # the harness may be waiting for a pause


if __name__ == "__main__":
    main()
