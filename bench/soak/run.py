"""The soak run: build the hosts, prepare the data, run the workload under the fault
schedule, heal, check independently, report; and remove everything it made, even when
interrupted.

Hosts (tests/multihost/cluster.py): storage (moto behind the fault proxy, Ceph mon + OSD),
service (``datahub serve --auth``), compute nodes a and b, each with its home on a small
tmpfs of its own (so "the node's disk is full" is a real ENOSPC that touches nothing else
on the machine), a read-only mount of ``src``, a write-back workspace mount, two readers
(mount, ``datahub://``), a writer, an API client and a pack-worker.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.latency_proxy import LatencyProxy
from bench.soak import check
from bench.soak.data import prepare
from bench.soak.events import read_events, read_inflight
from bench.soak.faults import Injector, Targets
from bench.soak.schedule import KINDS, make_schedule
from bench.soak.supervise import GUARD, Mount, PackJobs, WorkspaceCycles
from tests.multihost.cluster import API_PORT, S3_PORT, Cluster, Node, build_cluster

REPO = Path(__file__).resolve().parents[2]  # on the clients' PYTHONPATH (bench.soak.*)
PROXY_PORT = 5001
HOME_BYTES = "192m"  # each node's tmpfs: disk cache (cache.disk_bytes 256 MiB > this), journal, records
SERVICE_BYTES = "64m"  # the service's tmpfs: its SQLite catalog
CYCLE_SECONDS = 15.0
VERIFY_PROCS = 4  # processes reading every version back after the heal (Soak._verify)
EXIT_GUARD = 60.0  # after the run ends, a client still inside an operation this long is stalled


def _tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "dh-soak", str(path)], check=True)


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def _mounts_under(root: Path) -> list[str]:
    out = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(str(root)):
                out.append(point)
    return out


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _procs_mentioning(root: Path) -> list[str]:
    """Processes whose command line names the run's directory (this process and its
    parents, which started the run, excepted)."""
    mine, out = _ancestors(), []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in mine:
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(root) in cmd:
            out.append(f"{pid}: {cmd[:200]}")
    return out


def _netns_of(run_id: str) -> list[str]:
    res = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return [line.split()[0] for line in res.stdout.splitlines() if line.startswith(run_id)]


def _together(calls: list[Callable[[], object]]) -> None:
    """Run ``calls`` at once, each in a thread of its own, and wait for all; the first
    exception (in list order) is raised once all have ended.

    Why: the nodes' mounts, workspace cycles and the pack job are independent of each other
    (each its own daemon, lock and files; during the run they already go on side by side), and
    starting or finishing them one after another made the soak wait for each in turn."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    for future in futures:
        future.result()


def manifest_versions(manifest: Path) -> list[str]:
    return sorted(json.loads(manifest.read_text())["datasets"]["src"], key=int)


class Soak:
    def __init__(self, root: Path, seed: int, seconds: float, kinds: tuple[str, ...] = tuple(KINDS)) -> None:
        self.root, self.seed, self.seconds = root, seed, seconds
        self.schedule = make_schedule(seed, seconds, kinds)
        self.logs = root / "logs"
        self.events = root / "events"
        self.homes = {n: root / n / "home" for n in ("a", "b")}
        self.sizes = {"a": HOME_BYTES, "b": HOME_BYTES, "service": SERVICE_BYTES}
        self.homes["service"] = root / "service"
        self.clients: list[tuple[str, subprocess.Popen, Path | None]] = []
        self.notes: list[str] = []

    # --- the run ----------------------------------------------------------------------------------
    def run(self) -> dict:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.events.mkdir(parents=True, exist_ok=True)
        report: dict = {
            "seed": self.seed,
            "seconds": self.seconds,
            "schedule": [f.as_dict() for f in self.schedule],
        }
        run_id = ""
        started = time.time()
        self.phases: dict[str, float] = {}
        report["phases"] = self.phases
        try:
            for name, home in self.homes.items():
                _tmpfs(home, self.sizes[name])
            mark = time.monotonic()
            with build_cluster(
                self.root,
                moto_bind="0.0.0.0",
                node_s3_port=PROXY_PORT,
                node_home=self.homes.__getitem__,
                service_home=self.homes["service"],
            ) as cluster:
                run_id = cluster.net.run_id
                self._phase("cluster", mark)
                self._in_cluster(cluster, report)
                mark = time.monotonic()
            self._phase("teardown", mark)
        finally:
            for home in self.homes.values():
                _umount(home)
        report["wall_seconds"] = round(time.time() - started, 1)
        leaks = {
            "mounts": _mounts_under(self.root),
            "processes": _procs_mentioning(self.root),
            "namespaces": _netns_of(run_id) if run_id else [],
        }
        report["leaks"] = leaks
        report.setdefault("violations", [])
        report["violations"] += [f"leaked {kind}: {what}" for kind, items in leaks.items() for what in items]
        return report

    def _phase(self, name: str, since: float) -> float:
        """Record how long phase ``name`` took (seconds since ``since``) in the report's
        ``phases``; returns now, the next phase's start. Why: the soak is the suite's longest
        test, and what to make cheaper is only seen phase by phase."""
        now = time.monotonic()
        self.phases[name] = round(now - since, 1)
        return now

    def _in_cluster(self, cluster: Cluster, report: dict) -> None:
        proxy = LatencyProxy(
            f"http://127.0.0.1:{S3_PORT}",
            0,
            listen=cluster.storage.addr,
            control=True,
            argv_prefix=cluster.storage.argv([]),
            port=PROXY_PORT,
        )
        proxy.start()
        try:
            self._with_proxy(cluster, proxy, report)
        finally:
            proxy.stop()

    def _with_proxy(self, cluster: Cluster, proxy: LatencyProxy, report: dict) -> None:
        manifest = self.root / "manifest.json"
        t_setup = time.monotonic()
        prepare(cluster, self.seed, manifest)
        mark = self._phase("prepare", t_setup)
        token_file = self.root / "token"
        token_file.write_text(cluster.token)
        osd_pid = int((self.root / "ceph" / "pids" / "osd.0.pid").read_text())
        nodes = {"a": cluster.a, "b": cluster.b}
        specs = [f"src@{v}" for v in manifest_versions(manifest)]
        mounts = {n: Mount(node, node.root / "mnt", specs, self.logs) for n, node in nodes.items()}
        cycles = {
            n: WorkspaceCycles(node, node.root / "ws", node.root / "control.json", self.logs, CYCLE_SECONDS)
            for n, node in nodes.items()
        }
        pack = PackJobs([cluster.a, cluster.b], lambda n: self._plan(cluster.a, n), self.logs)
        try:
            _together([m.start for m in mounts.values()] + [c.begin for c in cycles.values()])
            report["setup_seconds"] = round(time.monotonic() - t_setup, 1)
            mark = self._phase("mounts", mark)
            until = time.time() + self.seconds
            self._start_clients(nodes, manifest, token_file, until)
            pack.begin()
            t0 = time.monotonic()
            report["t0_wall"] = time.time()
            injector = Injector(
                Targets(
                    cluster, proxy, mounts, {n: c.mount for n, c in cycles.items()}, pack, self.homes, osd_pid
                ),
                t0,
            )
            threads = injector.start(self.schedule)
            while time.time() < until:
                time.sleep(0.5)
            mark = self._phase("workload", mark)
            for th in threads:  # every fault heals itself; this waits for the heals
                th.join(GUARD + 30)
            mark = self._phase("heals", mark)
            report["faults"] = [o.as_dict() for o in injector.outcomes]
            report["unhealed"] = [o.as_dict() for o in injector.outcomes if o.error or not o.healed_at]
            stalled = self._stop_clients(until)
            mark = self._phase("clients_stop", mark)
            pack.stopping.set()  # no new job: the current one is finished below
            _together([c.finish for c in cycles.values()] + [pack.finish])
            mark = self._phase("finish", mark)
            report["supervisors"] = {
                "workspace_cycles": {n: c.cycle + 1 for n, c in cycles.items()},
                "workspace_commit_attempts": {n: sum(c.attempts.values()) for n, c in cycles.items()},
                "uncommitted": {
                    n: [c.name(k) for k, ok in c.committed.items() if not ok] for n, c in cycles.items()
                },
                "pack_jobs_finished": [job for _, job in pack.finished],
                "pack_worker_exits": dict(Counter(pack.exits)),
                "mount_starts": {n: m.starts for n, m in mounts.items()},
                "errors": [e for e in [pack.error, *(c.error for c in cycles.values())] if e],
            }
            _together([m.umount for m in mounts.values()])
            mark = self._phase("umount", mark)
            self._check(cluster, manifest, report, stalled)
            self._phase("check", mark)
        finally:
            for _, proc, _ in self.clients:
                if proc.poll() is None:
                    proc.kill()
            for m in [*mounts.values(), *(c.mount for c in cycles.values())]:
                if m.alive():
                    m.umount(timeout=30)

    def _plan(self, node: Node, n: int) -> str:
        deadline = time.monotonic() + GUARD
        while True:
            argv = [
                "--json",
                "pack",
                "photos@v1",
                "--to",
                f"packed-{n}",
                "--shard-size",
                "60KiB",
                "--plan-only",
            ]
            res = node.cli(*argv, check=False)
            if res.returncode == 0:
                return json.loads(res.stdout)["job"]
            if time.monotonic() > deadline:
                raise TimeoutError(f"pack --plan-only on {node.host.name} kept failing: {res.stderr[-500:]}")
            time.sleep(1.0)

    def _start_clients(self, nodes: dict[str, Node], manifest: Path, token_file: Path, until: float) -> None:
        py = [sys.executable, "-m"]
        common = ["--seed", str(self.seed), "--until", str(until)]
        for n, node in nodes.items():
            for via in ("mount", "fs"):
                infl = self.events / f"read-{via}-{n}.inflight"
                argv = [*py, "bench.soak.reader", "--node", n, "--via", via, "--root", str(node.root / "mnt")]
                argv += ["--config", str(node.config_path), "--manifest", str(manifest)]
                argv += [
                    "--events",
                    str(self.events / f"read-{via}-{n}.jsonl"),
                    "--inflight",
                    str(infl),
                    *common,
                ]
                self._client(f"read-{via}-{n}", node, argv, infl)
            infl = self.events / f"write-{n}.inflight"
            argv = [*py, "bench.soak.writer", "--node", n, "--root", str(node.root / "ws")]
            argv += [
                "--control",
                str(node.root / "control.json"),
                "--events",
                str(self.events / f"write-{n}.jsonl"),
            ]
            argv += ["--inflight", str(infl), *common]
            self._client(f"write-{n}", node, argv, infl)
            argv = [*py, "bench.soak.apiclient", "--node", n, "--url", f"http://10.213.0.20:{API_PORT}"]
            argv += ["--token-file", str(token_file), "--manifest", str(manifest)]
            argv += ["--events", str(self.events / f"api-{n}.jsonl"), *common]
            self._client(f"api-{n}", node, argv, None)

    def _client(self, name: str, node: Node, argv: list[str], inflight: Path | None) -> None:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - the process's lifetime
        env = {**node.env, "PYTHONPATH": os.pathsep.join([str(REPO), node.env.get("PYTHONPATH", "")])}
        self.clients.append((name, node.host.popen(argv, log=log, env=env), inflight))

    def _stop_clients(self, until: float) -> list[str]:
        """Wait for the clients to stop by themselves; one still inside an operation after
        the guard is stalled (reported with what it was doing), then killed."""
        stalled = []
        deadline = max(time.time(), until) + EXIT_GUARD
        for name, proc, inflight in self.clients:
            while proc.poll() is None and time.time() < deadline:
                time.sleep(0.2)
            if proc.poll() is None:
                doing = read_inflight(inflight) if inflight else {}
                since = time.time() - doing["t0"] if doing.get("t0") else 0.0
                stalled.append(
                    f"{name} still inside {doing.get('what', '?')} for {since:.0f} s after the run"
                )
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
            elif proc.returncode != 0:
                self.notes.append(f"client {name} exited {proc.returncode} (see logs/{name}.log)")
        return stalled

    # --- the check --------------------------------------------------------------------------------
    def _check(self, cluster: Cluster, manifest_path: Path, report: dict, stalled: list[str]) -> None:
        manifest = json.loads(manifest_path.read_text())
        violations: list[str] = list(stalled)
        violations += [
            f"fault not healed: {o['kind']} at {o['at']} ({o['error']})" for o in report["unhealed"]
        ]
        violations += [f"supervisor: {e}" for e in report["supervisors"]["errors"]]
        for n, names in report["supervisors"]["uncommitted"].items():
            violations += [f"workspace {w} on {n} never committed" for w in names]

        reads = check.ReadStats()
        via = {"mount_kill": "mount", "workspace_kill": "workspace"}
        for f in report["faults"]:
            if f["kind"] in via and f["hit"] != "nothing running":
                end = f["healed_at"] or self.seconds + GUARD
                window = (report["t0_wall"] + f["applied_at"], report["t0_wall"] + end + 1.0)
                reads.gaps.setdefault((f["target"], via[f["kind"]]), []).append(window)
        writer_events: list[dict] = []
        api_events: list[dict] = []
        for path in sorted(self.events.glob("*.jsonl")):
            evs = list(read_events(path))
            if path.name.startswith("write-"):
                writer_events += evs
            if path.name.startswith("api-"):
                api_events += evs
            for ev in evs:
                reads.add(ev)
        violations += reads.violations
        longest_op, longest_op_what, op_bad = check.op_stalls(writer_events)
        violations += op_bad
        calls, api_errs, api_bad = check.api_errors(api_events)
        violations += api_bad

        db = self.root / "service" / "catalog.db"
        dump = check.read_catalog(db)
        violations += check.check_catalog(dump)
        plan = [
            {"ds": ds, "v": v["seq"], "keys": sorted(dump.records[(ds, v["seq"])])}
            for ds, vs in sorted(dump.versions.items())
            for v in vs
        ]
        (self.root / "verify-plan.json").write_text(json.dumps(plan))
        mark = time.monotonic()
        read_back, verify_bad = self._verify(cluster.a, plan)
        self._phase("check_verify", mark)
        violations += verify_bad

        origin = self._origin_shas(cluster, dump, manifest["urls"])
        models = check.workspace_models(writer_events)
        versions_read = bytes_read = 0
        by_version: dict[tuple[str, int], dict[str, str]] = {}
        for item in read_back:
            where = f"{item['ds']}@{item['v']}/{item['key']}"
            if "err" in item:
                violations.append(f"unreadable after the heal: {where}: {item['err']}")
                continue
            by_version.setdefault((item["ds"], item["v"]), {})[item["key"]] = item["sha"]
            bytes_read += item["size"]
            url = dump.records[(item["ds"], item["v"])][item["key"]]["url"]
            want = manifest["urls"].get(url) or origin.get(url)
            if want is None:
                violations.append(f"{where}: the origin has no object {url}")
            elif item["sha"] != want:
                violations.append(f"wrong bytes after the heal: {where} (not the bytes of {url})")
        unreadable = {(i["ds"], i["v"]) for i in read_back if "err" in i}
        versions_read = len({(i["ds"], i["v"]) for i in plan} - unreadable) if read_back else 0
        ws_checked = 0
        for ds, vs in sorted(dump.versions.items()):
            if not ds.startswith("out-"):
                continue
            node = ds.removeprefix("out-")
            for v in vs:
                m = re.fullmatch(r"workspace w-(\w+)-(\d+)", v["message"])
                if m is None:
                    violations.append(f"{ds}@{v['seq']}: not a workspace commit ({v['message']!r})")
                    continue
                model = models.get((node, int(m.group(2))), {})
                ws_checked += len(model)
                violations += check.check_workspace_version(
                    f"{ds}@{v['seq']} ({v['message']})",
                    model,
                    by_version.get((ds, v["seq"]), {}),
                    dump.records.get((ds, v["seq"]), {}),
                    dump.records.get((ds, v["parent"]), {}) if v["parent"] else {},
                )
        committed_msgs = {
            v["message"] for ds, vs in dump.versions.items() if ds.startswith("out-") for v in vs
        }
        for (node, cycle), model in sorted(models.items()):
            must = [p for p, allowed in model.items() if None not in allowed]
            if must and f"workspace w-{node}-{cycle}" not in committed_msgs:
                violations.append(
                    f"workspace w-{node}-{cycle}: {len(must)} acknowledged files, no committed version"
                )
        report.update(
            reads={
                "reads": reads.reads,
                "verified": reads.verified,
                "bytes_verified": reads.bytes,
                "by_node": dict(reads.by_node),
                "wrong": reads.wrong,
                "errors": dict(reads.errors.most_common()),
                "longest_read_seconds": reads.longest,
                "longest_read": reads.longest_what,
            },
            writes={
                "acknowledged": check.acknowledged(writer_events),
                "files_checked": ws_checked,
                "errors": dict(
                    Counter(ev["err"] for ev in writer_events if ev.get("op") == "fail").most_common()
                ),
                "longest_operation_seconds": round(longest_op, 3),
                "longest_operation": longest_op_what,
            },
            api={"calls": dict(sorted(calls.items())), "errors": dict(api_errs.most_common())},
            catalog={
                "datasets": len(dump.versions),
                "versions": sum(len(v) for v in dump.versions.values()),
                "versions_read_end_to_end": versions_read,
                "bytes_read_end_to_end": bytes_read,
                "tags": sum(len(t) for t in dump.tags.values()),
            },
            notes=self.notes,
            violations=violations,
        )

    def _verify(self, node: Node, plan: list[dict]) -> tuple[list[dict], list[str]]:
        """Every key of ``plan`` read end to end on ``node`` by ``VERIFY_PROCS`` verify
        processes, each a share of the keys (dealt in turn), all at once: the reads wait on
        the network, the catalog service and the origin far more than on a CPU, and one
        process reading them one after another was most of the check's time. Any process
        that fails is a violation, and then nothing counts as read back (as with one)."""
        shares: list[dict[tuple[str, int], list[str]]] = [{} for _ in range(VERIFY_PROCS)]
        n = 0
        for item in plan:
            for key in item["keys"]:
                shares[n % VERIFY_PROCS].setdefault((item["ds"], item["v"]), []).append(key)
                n += 1
        env = {**node.env, "PYTHONPATH": os.pathsep.join([str(REPO), node.env.get("PYTHONPATH", "")])}

        def one(i: int) -> tuple[subprocess.CompletedProcess, Path]:
            part = self.root / f"verify-plan-{i}.json"
            part.write_text(
                json.dumps([{"ds": ds, "v": v, "keys": keys} for (ds, v), keys in shares[i].items()])
            )
            out = self.root / f"verify-out-{i}.json"
            argv = [sys.executable, "-m", "bench.soak.verify", "--config", str(node.config_path)]
            argv += ["--plan", str(part), "--out", str(out)]
            return node.host.run(argv, env=env, timeout=1800, check=False), out

        with ThreadPoolExecutor(VERIFY_PROCS) as pool:
            results = list(pool.map(one, range(VERIFY_PROCS)))
        bad = [
            f"verify exited {res.returncode}: {res.stderr[-1000:]}" for res, _ in results if res.returncode
        ]
        if bad:
            return [], bad
        return [item for _, out in results for item in json.loads(out.read_text())], []

    def _origin_shas(
        self, cluster: Cluster, dump: check.CatalogDump, known: dict[str, str]
    ) -> dict[str, str]:
        """sha256 of each object no manifest knows, fetched straight from moto on the storage host."""
        urls = sorted({r["url"] for recs in dump.records.values() for r in recs.values()} - set(known))
        if not urls:
            return {}
        listing = self.root / "origin-urls.json"
        listing.write_text(json.dumps(urls))
        out = cluster.s3(
            "import hashlib, json\n"
            f"urls = json.load(open({str(listing)!r}))\n"
            "shas = {}\n"
            "for url in urls:\n"
            "    bucket, _, key = url.removeprefix('s3://').partition('/')\n"
            "    body = s3.get_object(Bucket=bucket, Key=key)['Body'].read()\n"
            "    shas[url] = hashlib.sha256(body).hexdigest()\n"
            "print(json.dumps(shas))\n"
        )
        return json.loads(out)


def ok(report: dict) -> bool:
    return not report.get("violations")
