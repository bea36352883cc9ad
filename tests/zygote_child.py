"""``python -m tests.zygote_child ACTION [ARGS]``: a child for tests/test_zygote.py, run through
the zygote (tests/zygote.py) and through a fresh interpreter, which must behave the same.

``report PATH``: write what the process sees (argv, cwd, environment, open descriptors above
2, signal dispositions, its cmdline, whether pyfuse3 was imported before it ran) to PATH as
JSON. ``exit N``, ``message TEXT`` (SystemExit with a text), ``raise``, ``abort``, ``sleep``
(until signalled; prints ``ready`` first), ``write FD TEXT`` (to a passed descriptor), ``echo`` (stdout and stderr
lines, ``\\r\\n`` too), ``cat VAR`` (the variable VAR's value, then its stdin, on stdout).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

PRELOADED = "pyfuse3" in sys.modules  # before this module imports anything of its own


def _open_fds() -> list[int]:
    found = []
    for fd in range(3, 1024):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.append(fd)
    return found


def _disposition(sig: int) -> str:
    handler = signal.getsignal(sig)
    if handler is signal.default_int_handler:
        return "KeyboardInterrupt"
    return {signal.SIG_DFL: "default", signal.SIG_IGN: "ignore"}.get(handler, "handler")


def main(argv: list[str]) -> int:
    action = argv[0]
    if action == "report":
        fds = _open_fds()
        with open(f"/proc/{os.getpid()}/cmdline", "rb") as fh:
            cmdline = [os.fsdecode(a) for a in fh.read().split(b"\0")[:-1]]
        report = {
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "fds": fds,
            "signals": {
                name: _disposition(getattr(signal, name))
                for name in ("SIGINT", "SIGPIPE", "SIGCHLD", "SIGTERM", "SIGXFSZ")
            },
            "cmdline": cmdline,
            "path0": sys.path[0],
            "path": sys.path,
            "preloaded": PRELOADED,
        }
        with open(argv[1], "w") as fh:
            json.dump(report, fh)
        return 0
    if action == "exit":
        return int(argv[1])
    if action == "message":
        sys.exit(argv[1])
    if action == "raise":
        raise RuntimeError("the child's own failure")
    if action == "abort":
        os.abort()
    if action == "sleep":
        print("ready", flush=True)
        while True:
            time.sleep(60)
    if action == "write":  # ``write FD TEXT``: TEXT to descriptor FD (a passed one), then its open ones
        os.write(int(argv[1]), argv[2].encode())
        os.close(int(argv[1]))
        print(json.dumps(_open_fds()), flush=True)
        return 0
    if action == "echo":
        sys.stdout.write("out one\r\nout two\n")
        print("err line", file=sys.stderr)
        return 0
    if action == "cat":
        print(os.environ.get(argv[1], "<unset>"))
        sys.stdout.write(sys.stdin.read())
        return 0
    raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
