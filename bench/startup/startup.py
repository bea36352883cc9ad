"""CPU and wall per ``datahub`` process start, against same-run interpreter baselines.

    .venv/bin/python bench/startup/startup.py [--rounds 5] [--base COMMIT] [--only ls,commit,...]

Each round runs every command once per tree, trees alternating (so both see the same load):
``head`` is this checkout, ``base`` (with ``--base``) a ``git archive`` of COMMIT, run with
the same interpreter and PYTHONPATH pointing at the tree. Baselines measured in the same
rounds: ``python -c pass`` and ``python -c "import boto3"``. A command that runs to its end
is measured by ``wait4`` (CPU of the process and the children it waited for); a server (the
mount daemon, ``datahub serve``, the CSI plugin) is measured from /proc once it is ready
(mounted, answering /healthz, its socket answering), then stopped. Prints medians per command
and tree, the ratio head/base, and the load. No network but loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: bench.base_tree

from bench.base_tree import extract  # noqa: E402

PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float:
    """utime + stime of a live process (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run_to_end(argv: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of a command run to its end; it must exit 0."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
    proc.stderr.close()
    return usage.ru_utime + usage.ru_stime, wall


def run_until_ready(
    argv: list[str], env: dict, cwd: Path, ready: Callable[[], bool], timeout: float = 120.0
) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of a server from its start until ``ready()``; then SIGTERM."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while not ready():
            if proc.poll() is not None:
                raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.read().decode()}")
            if time.monotonic() - start > timeout:
                raise SystemExit(f"{' '.join(argv)} not ready after {timeout} s")
            time.sleep(0.01)
        wall = time.monotonic() - start
        return _cpu_of(proc.pid), wall
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


def _is_mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/mounts").read_text().splitlines())


class Fixture:
    """One home with a catalog and a small dataset ``ds`` (files on local disk), made once."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.home = work / "home"
        self.counter = 0
        src = work / "src"
        for i in range(200):
            (src / f"d{i % 10}").mkdir(parents=True, exist_ok=True)
            (src / f"d{i % 10}" / f"f{i}.bin").write_bytes(os.urandom(1024))
        self.config = work / "datahub.toml"
        self.config.write_text(f"home = {json.dumps(str(self.home))}\n")
        env = clean_env(ROOT)
        for argv in (["init"], ["import", str(src), "--to", "ds", "-m", "bench"]):
            run_to_end([PY, "-m", "datahub.cli.main", "--home", str(self.home), *argv], env, work)
        self.empty_home = work / "empty-home"  # a home with a catalog and no dataset
        run_to_end([PY, "-m", "datahub.cli.main", "--home", str(self.empty_home), "init"], env, work)

    def changes(self) -> str:
        """A one-line change set with a key no earlier commit used (each commit is a new version)."""
        self.counter += 1
        path = self.work / f"changes-{self.counter}.jsonl"
        record = {"key": f"bench/{self.counter}.txt", "url": (self.work / "src" / "d0" / "f0.bin").as_uri(),
                  "etag": "bench", "size": 1024}  # fmt: skip
        path.write_text(json.dumps({"op": "put", "record": record}) + "\n")
        return str(path)


def clean_env(tree: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATAHUB_")}
    env["PYTHONPATH"] = str(tree)
    return env


def commands(fx: Fixture, only: set[str] | None) -> dict[str, Callable[[Path], tuple[float, float]]]:
    cli = [PY, "-m", "datahub.cli.main"]
    home = ["--home", str(fx.home)]

    def simple(*args: str) -> Callable[[Path], tuple[float, float]]:
        return lambda tree: run_to_end([*cli, *args], clean_env(tree), fx.work)

    def commit(tree: Path) -> tuple[float, float]:
        return run_to_end([*cli, *home, "commit", "ds", "--changes", fx.changes()], clean_env(tree), fx.work)

    def serve(tree: Path) -> tuple[float, float]:
        port = _free_port()
        argv = [*cli, *home, "serve", "--port", str(port), "--no-labelx"]
        return run_until_ready(
            argv, clean_env(tree), fx.work, lambda: _answers(f"http://127.0.0.1:{port}/healthz")
        )

    def serve_all(tree: Path) -> tuple[float, float]:
        port = _free_port()
        argv = [*cli, *home, "serve", "--port", str(port)]
        return run_until_ready(
            argv, clean_env(tree), fx.work, lambda: _answers(f"http://127.0.0.1:{port}/healthz")
        )

    def labelx(tree: Path) -> tuple[float, float]:
        port = _free_port()
        argv = [*cli, *home, "labelx", "serve", "--port", str(port)]
        return run_until_ready(
            argv, clean_env(tree), fx.work, lambda: _answers(f"http://127.0.0.1:{port}/login")
        )

    def background(tree: Path) -> tuple[float, float]:
        """`datahub mount --background` until it returns (mounted): its CPU and its daemon's so far."""
        point = fx.work / "mnt-bg"
        point.mkdir(exist_ok=True)
        env = clean_env(tree)
        argv = [*cli, *home, "mount", "--background", str(point), "ds", "--no-prefetch"]
        start = time.monotonic()
        cli_cpu, _ = run_to_end(argv, env, fx.work)
        wall = time.monotonic() - start
        record = next((fx.home / "run" / "mounts").glob("*.json"))
        daemon = json.loads(record.read_text())["pid"]
        cpu = cli_cpu + _cpu_of(daemon)
        run_to_end([*cli, *home, "umount", str(point)], env, fx.work)
        return cpu, wall

    def mount(tree: Path) -> tuple[float, float]:
        """The daemon as `datahub mount --background` starts it, from exec until mounted."""
        point = fx.work / "mnt"
        point.mkdir(exist_ok=True)
        argv = [PY, "-m", "fuse_adapter", *home, "mount", str(point), "ds", "--no-prefetch", "--foreground"]
        try:
            return run_until_ready(argv, clean_env(tree), fx.work, lambda: _is_mounted(point))
        finally:
            deadline = time.monotonic() + 30
            while _is_mounted(point) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _is_mounted(point):
                subprocess.run(["fusermount3", "-uz", str(point)], check=False)

    def csi(tree: Path) -> tuple[float, float]:
        sock = fx.work / "csi.sock"
        sock.unlink(missing_ok=True)
        state = fx.work / "csi-state"
        argv = [PY, "-m", "csi", "--endpoint", f"unix://{sock}", "--node-id", "bench",
                "--state-dir", str(state), "--config", str(fx.config)]  # fmt: skip
        # the node plugin exits 2 at start without the kubelet's dir (none on a bench machine);
        # a --base tree from before --kubelet-dir has no such flag
        if "--kubelet-dir" in (tree / "csi" / "__main__.py").read_text():
            argv += ["--kubelet-dir", str(fx.work)]

        def ready() -> bool:
            if not sock.exists():
                return False
            with socket.socket(socket.AF_UNIX) as s:
                try:
                    s.connect(str(sock))
                    return True
                except OSError:
                    return False

        return run_until_ready(argv, clean_env(tree), fx.work, ready)

    table: dict[str, Callable[[Path], tuple[float, float]]] = {
        "python -c pass": lambda tree: run_to_end([PY, "-c", "pass"], clean_env(tree), fx.work),
        "python -c 'import boto3'": lambda tree: run_to_end(
            [PY, "-c", "import boto3"], clean_env(tree), fx.work
        ),
        "help": simple("--help"),
        "version": simple("--version"),
        "ls": simple(*home, "ls", "ds"),
        "dataset list, empty home": simple("--home", str(fx.empty_home), "dataset", "list"),
        "log": simple(*home, "log", "ds"),
        "dataset list": simple(*home, "dataset", "list"),
        "commit": commit,
        "cache stats": simple(*home, "--json", "cache", "stats"),
        "mount daemon": mount,
        "serve": serve,
        "serve (with LabelX)": serve_all,
        "labelx serve": labelx,
        "mount --background": background,
        "train_packed.py --help": lambda tree: run_to_end(
            [PY, str(tree / "examples" / "train_packed.py"), "--help"], clean_env(tree), fx.work
        ),
        "csi plugin": csi,
    }
    return {k: v for k, v in table.items() if only is None or k in only or k.startswith("python")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base", metavar="COMMIT", help="also run a git archive of COMMIT (alternating)")
    ap.add_argument("--only", help="comma-separated command names (baselines always run)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="datahub-startup-"))
    trees = {"head": ROOT}
    if args.base:
        trees = {"base": extract(args.base, work / "base"), "head": ROOT}
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    load_start = Path("/proc/loadavg").read_text().split()[0]
    print(f"datahub startup bench: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, head {commit}"
          f"{', base ' + args.base if args.base else ''}, {args.rounds} rounds, {os.cpu_count()} CPUs, "
          f"load {load_start}")  # fmt: skip
    try:
        fx = Fixture(work)
        table = commands(fx, set(args.only.split(",")) if args.only else None)
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(args.rounds):
            for name, fn in table.items():
                for tree_name, tree in trees.items():
                    results.setdefault((name, tree_name), []).append(fn(tree))
        load_end = Path("/proc/loadavg").read_text().split()[0]
        report(table, trees, results)
        print(f"load {load_start} -> {load_end}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def report(table: dict, trees: dict, results: dict) -> None:
    names = list(trees)
    head = ["command"] + [f"{t} CPU-s" for t in names] + [f"{t} wall-s" for t in names]
    if len(names) == 2:
        head += ["CPU head/base", "head CPU / boto3 import"]
    print(" | ".join(head))
    boto = statistics.median(c for c, _ in results[("python -c 'import boto3'", "head")])
    for name in table:
        cpu = {t: statistics.median(c for c, _ in results[(name, t)]) for t in names}
        wall = {t: statistics.median(w for _, w in results[(name, t)]) for t in names}
        row = [name] + [f"{cpu[t]:.3f}" for t in names] + [f"{wall[t]:.3f}" for t in names]
        if len(names) == 2:
            row += [f"{cpu['head'] / cpu['base']:.2f}" if cpu["base"] else "-", f"{cpu['head'] / boto:.2f}"]
        print(" | ".join(row))


if __name__ == "__main__":
    sys.exit(main())
