#!/usr/bin/env python3
"""Driver: run the workloads against configurations (FUSE mounts, local dir, direct S3), cold then warm.

For every (rep, config, workload):
  cold pass: [unmount] -> empty cache dirs -> sync + drop kernel caches -> mount -> workload
  warm pass: the same workload again on the same mount (new process; daemon caches kept)
  then unmount.
Each pass is one JSON line in --out with the workload's result, the S3 requests it caused
(counted from the moto request log), and CPU seconds of the mount daemon / endpoint / workload.

Examples
  ./run_bench.py --configs all --reps 3
  ./run_bench.py --configs rclone-off,s3fs --workloads epoch,listing
  # any other FUSE mount, ad hoc (or add a section to peers.toml):
  ./run_bench.py --name datahub --mount 'datahub mount s3://bench {mnt} --cache-dir {cache}' \
                 --unmount 'fusermount3 -u {mnt}' --cache-dir '{cache}'
  # something already mounted (cold = kernel caches dropped only, no remount):
  ./run_bench.py --name mine --mnt /mnt/x
"""

import argparse
import datetime
import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.environ.get("BENCH_WORK", "/var/tmp/peers-bench")
ENDPOINT = os.environ.get("BENCH_ENDPOINT", "http://127.0.0.1:5002")
BUCKET = os.environ.get("BENCH_BUCKET", "bench")
ALL_WORKLOADS = ["epoch", "listing", "large_seq", "large_rand", "torch"]
SCRIPT = {
    "epoch": "epoch.py",
    "listing": "listing.py",
    "large_seq": "large_seq.py",
    "large_rand": "large_rand.py",
    "torch": "torch_epoch.py",
}
CLK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def write_peer_credentials():
    """rclone remote + s3fs password file pointing at the endpoint (rewritten every run)."""
    key = os.environ.get("AWS_ACCESS_KEY_ID", "testing")
    sec = os.environ.get("AWS_SECRET_ACCESS_KEY", "testing")
    os.makedirs(WORK, exist_ok=True)
    with open(os.path.join(WORK, "rclone.conf"), "w") as f:
        f.write(
            f"[s3bench]\ntype = s3\nprovider = Other\nenv_auth = false\naccess_key_id = {key}\n"
            f"secret_access_key = {sec}\nendpoint = {ENDPOINT}\nregion = us-east-1\nforce_path_style = true\n"
        )
    pw = os.path.join(WORK, "s3fs.passwd")
    with open(pw, "w") as f:
        f.write(f"{key}:{sec}\n")
    os.chmod(pw, 0o600)


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def cpu_s(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / CLK
    except (OSError, ValueError, IndexError, TypeError):
        return None


def endpoint_pid():
    try:
        with open(os.path.join(WORK, "run", "moto.pid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


REQ_RE = re.compile(r'"([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3})')
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")  # werkzeug colours some status lines


class RequestLog:
    """Counts S3 requests by reading the new lines of the endpoint's access log (moto/werkzeug format)."""

    def __init__(self, path):
        self.path = path
        self.pos = self._size()

    def _size(self):
        try:
            return os.path.getsize(self.path)
        except OSError:
            return None

    def take(self):
        if self.pos is None:
            self.pos = self._size()
            return None
        time.sleep(0.3)  # let the endpoint finish logging the last responses
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            data = f.read()
        self.pos += len(data)
        c = {"GET": 0, "HEAD": 0, "LIST": 0, "other": 0, "4xx": 0, "5xx": 0}
        for m in REQ_RE.finditer(ANSI_RE.sub("", data.decode("utf-8", "replace"))):
            meth, target, status = m.group(1), m.group(2), int(m.group(3))
            path, _, query = target.partition("?")
            is_key = len(path.strip("/").split("/", 1)) > 1
            if meth == "GET" and (
                not is_key or "list-type" in query or "prefix=" in query or "delimiter=" in query
            ):
                c["LIST"] += 1
            elif meth in ("GET", "HEAD"):
                c[meth] += 1
            else:
                c["other"] += 1
            if 400 <= status < 500:
                c["4xx"] += 1
            elif status >= 500:
                c["5xx"] += 1
        return c


def du(paths):
    total = 0
    for p in paths:
        for d, _, fs in os.walk(p):
            for f in fs:
                try:
                    total += os.lstat(os.path.join(d, f)).st_blocks * 512
                except OSError:
                    pass
    return total


class Config:
    def __init__(self, name, spec, defaults):
        self.name = name
        self.kind = spec.get("kind", "mount")
        self.vars = {
            "work": WORK,
            "endpoint": ENDPOINT,
            "bucket": BUCKET,
            "home": HERE,
            "name": name,
            "mnt": spec.get("mnt", os.path.join(WORK, "mnt", name)),
            "cache": os.path.join(WORK, "cache", name),
        }
        self.vars["mnt"] = self.fmt(self.vars["mnt"])
        self.mount_cmd = self.fmt(spec.get("mount", ""))
        self.unmount_cmd = self.fmt(spec.get("unmount", defaults.get("unmount", "fusermount3 -u {mnt}")))
        self.cache_dirs = [self.fmt(c) for c in spec.get("cache_dirs", [])]
        self.backend = spec.get("backend")
        self.workloads = spec.get("workloads", ALL_WORKLOADS)
        self.args = spec.get("args", {})  # {workload: [extra arguments]}, e.g. {"epoch": ["--threads", "64"]}
        self.env = {k: self.fmt(str(v)) for k, v in spec.get("env", {}).items()}
        self.env_unset = spec.get("env_unset", [])
        sub = spec.get("subdir", "")
        if self.kind in ("mount", "premounted"):
            self.root = os.path.join(self.vars["mnt"], sub) if sub else self.vars["mnt"]
        else:
            self.root = self.fmt(spec["root"])
        self.proc = None
        self.logf = None

    def fmt(self, s):
        return s.format(**self.vars) if s else s

    def mount(self):
        if self.kind != "mount":
            return
        mnt = self.vars["mnt"]
        if os.path.ismount(mnt):
            self.unmount()
        os.makedirs(mnt, exist_ok=True)
        os.makedirs(os.path.join(WORK, "logs"), exist_ok=True)
        self.logf = open(os.path.join(WORK, "logs", f"{self.name}.log"), "ab")  # noqa: SIM115 - lives as long as the mount
        self.logf.write(f"\n=== {datetime.datetime.now().isoformat()} {self.mount_cmd}\n".encode())
        self.logf.flush()
        self.proc = subprocess.Popen(
            shlex.split(self.mount_cmd),
            stdout=self.logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={k: v for k, v in {**os.environ, **self.env}.items() if k not in self.env_unset},
        )
        t0 = time.time()
        while not os.path.ismount(mnt):
            if self.proc.poll() not in (None, 0):
                raise RuntimeError(
                    f"{self.name}: mount command exited {self.proc.returncode}; see logs/{self.name}.log"
                )
            if time.time() - t0 > 30:
                raise RuntimeError(f"{self.name}: {mnt} not mounted after 30s")
            time.sleep(0.05)
        return time.time() - t0

    def daemon_pid(self):
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def unmount(self):
        if self.kind != "mount":
            return
        mnt = self.vars["mnt"]
        if os.path.ismount(mnt):
            subprocess.run(
                shlex.split(self.unmount_cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        if self.proc is not None:
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.kill(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
            self.proc = None
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-uz", mnt])
        if self.logf:
            self.logf.close()
            self.logf = None

    def clear_caches(self):
        for c in self.cache_dirs:
            shutil.rmtree(c, ignore_errors=True)
            os.makedirs(c, exist_ok=True)


def run_pass(cfg, workload, phase, rep, args, reqlog, extra):
    limit = args.limits.get(workload, 150) * args.limit_scale
    cmd = [
        sys.executable,
        os.path.join(HERE, "workloads", SCRIPT[workload]),
        "--root",
        cfg.root,
        "--manifest",
        args.manifest,
        "--max-seconds",
        str(limit),
        "--endpoint",
        ENDPOINT,
    ]
    if cfg.backend:
        cmd += ["--backend", cfg.backend]
    cmd += cfg.args.get(workload, [])
    dpid, epid = cfg.daemon_pid(), endpoint_pid()
    d0, e0 = cpu_s(dpid), cpu_s(epid)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=limit + 120)
        lines = [line for line in cp.stdout.splitlines() if line.startswith("{")]
        res = json.loads(lines[-1]) if lines else {"ok": False, "error": cp.stderr[-2000:]}
        if cp.returncode and "error" not in res:
            res["error"] = cp.stderr[-2000:]
    except subprocess.TimeoutExpired:
        res = {"ok": False, "error": f"workload exceeded {limit + 120:.0f}s wall"}
    wall = time.time() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    d1, e1 = cpu_s(dpid), cpu_s(epid)
    rec = {
        "ts": datetime.datetime.now().isoformat(timespec="seconds"),
        "rep": rep,
        "config": cfg.name,
        "kind": cfg.kind,
        "workload": workload,
        "phase": phase,
        "wall_s": round(wall, 3),
        "result": res,
        "requests": reqlog.take(),
        "cpu_s": {
            "daemon": None if d0 is None or d1 is None else round(d1 - d0, 2),
            "endpoint": None if e0 is None or e1 is None else round(e1 - e0, 2),
            "workload": round((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime), 2),
        },
        **extra,
    }
    if cfg.cache_dirs:
        rec["cache_bytes"] = du(cfg.cache_dirs)
    return rec


def summary(rec):
    r = rec["result"]
    key = {
        "epoch": "files_per_s",
        "listing": "seconds",
        "large_seq": "mib_per_s",
        "large_rand": "reads_per_s",
        "torch": "images_per_s",
    }[rec["workload"]]
    v = r.get(key)
    s = (
        f"{key}={v:.2f}"
        if isinstance(v, (int, float))
        else f"ERROR {r.get('error', r.get('skipped', ''))[:300]}"
    )
    return f"{s}{' CAPPED' if r.get('capped') else ''} req={rec['requests']} cpu={rec['cpu_s']}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peers", default=os.path.join(HERE, "peers.toml"))
    p.add_argument("--configs", default="all", help="comma list of names in peers.toml, or 'all'")
    p.add_argument("--workloads", default=",".join(ALL_WORKLOADS))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--rep-start", type=int, default=1)
    p.add_argument("--out", default=os.path.join(HERE, "results", f"raw-{datetime.date.today()}.jsonl"))
    p.add_argument("--manifest", default=os.path.join(WORK, "manifest.json"))
    p.add_argument("--endpoint-log", default=os.path.join(WORK, "run", "moto.log"))
    p.add_argument("--limit-scale", type=float, default=1.0, help="multiply every per-pass time limit")
    p.add_argument("--name", help="ad-hoc config name (instead of --configs)")
    p.add_argument("--mount", help="ad-hoc mount command (templated)")
    p.add_argument("--unmount", default="fusermount3 -u {mnt}")
    p.add_argument("--mnt", help="ad-hoc mount point; alone = already mounted")
    p.add_argument(
        "--cache-dir", action="append", default=[], help="ad-hoc: emptied before each cold pass (repeatable)"
    )
    p.add_argument(
        "--env-unset", action="append", default=[], help="ad-hoc: drop this variable from the mount's env"
    )
    args = p.parse_args()

    with open(args.peers, "rb") as f:
        peers = tomllib.load(f)
    args.limits = peers.get("limits", {})
    defaults = peers.get("defaults", {})
    if args.name:
        spec = {
            "kind": "mount" if args.mount else "premounted",
            "mount": args.mount or "",
            "unmount": args.unmount,
            "cache_dirs": args.cache_dir,
            "env_unset": args.env_unset,
        }
        if args.mnt:
            spec["mnt"] = args.mnt
        configs = [Config(args.name, spec, defaults)]
    else:
        names = list(peers["configs"]) if args.configs == "all" else args.configs.split(",")
        configs = [Config(n, peers["configs"][n], defaults) for n in names]
    workloads = args.workloads.split(",")
    write_peer_credentials()
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    reqlog = RequestLog(args.endpoint_log)
    out = open(args.out, "a")  # noqa: SIM115 - appended to for the whole run
    meta = {
        "meta": True,
        "ts": datetime.datetime.now().isoformat(timespec="seconds"),
        "uname": os.uname().release,
        "cpus": os.cpu_count(),
        "endpoint": ENDPOINT,
        "versions": {
            t: subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip().splitlines()[:1]
            for t, c in {
                "rclone": "rclone version",
                "s3fs": "s3fs --version",
                "moto": f"{sys.executable} -m pip show moto | grep ^Version",
            }.items()
        },
    }
    out.write(json.dumps(meta) + "\n")
    for rep in range(args.rep_start, args.rep_start + args.reps):
        for cfg in configs:
            for w in workloads:
                if w not in cfg.workloads:
                    continue
                extra = {}
                try:
                    cfg.unmount()
                    cfg.clear_caches()
                    extra["drop_caches"] = drop_caches()
                    reqlog.take()
                    mt = cfg.mount()
                    if mt is not None:
                        extra["mount_s"] = round(mt, 3)
                    extra["requests_at_mount"] = reqlog.take()
                    for phase in ("cold", "warm"):
                        rec = run_pass(cfg, w, phase, rep, args, reqlog, extra if phase == "cold" else {})
                        out.write(json.dumps(rec) + "\n")
                        out.flush()
                        log(f"rep{rep} {cfg.name:12s} {w:10s} {phase}: {summary(rec)}")
                except Exception as ex:  # keep going with the next workload/config
                    log(f"rep{rep} {cfg.name} {w}: FAILED {ex}")
                    out.write(
                        json.dumps(
                            {
                                "rep": rep,
                                "config": cfg.name,
                                "workload": w,
                                "phase": "cold",
                                "result": {"ok": False, "error": str(ex)},
                            }
                        )
                        + "\n"
                    )
                finally:
                    cfg.unmount()
    out.close()


if __name__ == "__main__":
    main()
