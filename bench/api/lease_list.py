"""What one ``GET /v1/remote/leases`` costs the server with N leases in its catalog (review17d).

    .venv/bin/python bench/api/lease_list.py [BASE_TREE] [--leases 100000] [--rounds 2] [--targets 0]

Every lease ever taken stays a row (released ones keep their target), and any token may take
leases for names it makes up, each bound to a dataset it may create. A child process per tree
and round builds a SQLite catalog in a temporary directory under /var/tmp with N leases, each
bound to its own commit target, none of which exists (the worst case for a non-admin's list:
one role check per target), all taken by ``mallory``, answers the list in process (FastAPI's
TestClient, no network) to a global admin, to a token with no role anywhere (``eve``) and to
``mallory`` (who took them all), and reports for each (its first page, since leasepage17
pages the list): process CPU seconds, the catalog's dataset lookups, rows, ``next`` and bytes
of the answer, and the process's peak RSS (VmHWM) before the requests and after each.
With ``--targets T`` (leasefilter18), 90 % of the leases are bound to T existing datasets
instead (round robin by name), the other 10 % stay mallory's, each with its own missing
target; ``bob`` writes the first dataset (sees 0.9/T of the leases), ``carol`` writes every
one (sees 90 %), and both are listed too; then eve and bob walk the whole list (``next`` until
null): requests, rows and CPU.
With BASE_TREE (another checkout), base and head children alternate; the load average is
printed, as wall times are noise on a shared machine and are not reported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

HEAD = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HEAD / "bench" / "writeback"))
from gc_rewriter import _load, run_child  # noqa: E402 - the sibling bench owns the A/B child runner


def _child(arg: str) -> dict:
    from fastapi.testclient import TestClient

    import datahub
    from datahub.api.app import create_app
    from datahub.api.tokens import issue_token
    from datahub.catalog import open_catalog
    from datahub.config import load_config

    leases, targets = (int(part) for part in f"{arg}:0".split(":")[:2])
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        config = load_config(env={}, overrides={"home": str(Path(tmp) / "var")})
        config.api.local_mode = False
        config.home_path.mkdir(parents=True)
        catalog = open_catalog(config.resolved_catalog_url)
        callers = ["admin", "eve", "mallory", *(["bob", "carol"] if targets else [])]
        tokens = {
            who: issue_token(catalog.store, "root" if who == "admin" else who, admin=who == "admin")[0]
            for who in callers
        }
        for t in range(targets):
            acl = {"carol": "writer", **({"bob": "writer"} if t == 0 else {})}
            catalog.create_dataset(f"d-{t:03d}", owner="root", acl=acl)

        def target(i: int) -> str:
            # every tenth is mallory's own; the others go round the datasets in turn
            return f"d-{(i - i // 10 - 1) % targets:03d}" if targets and i % 10 else f"out-{i:06d}"

        rows = [
            (
                f"ws-{i:06d}",
                uuid.uuid4().hex,
                f"host node-{i % 97} pid {i} [{'root' if target(i).startswith('d-') else 'mallory'}]",
                1,
                time.time() + 3600,
                target(i),
            )
            for i in range(leases)
        ]
        with catalog.store._conn() as conn:  # one transaction: N takes would be N fsyncs
            conn.executemany(
                "INSERT INTO leases (name, owner, holder, epoch, expires, dataset) VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
        lookups = [0]
        real_get = catalog.get_dataset

        def counted(name: str):
            lookups[0] += 1
            return real_get(name)

        catalog.get_dataset = counted  # type: ignore[method-assign]
        app = create_app(config, catalog=catalog)
        out: dict = {"datahub": str(Path(datahub.__file__).parent), "leases": leases, "targets": targets}
        out["vm_hwm_mib_before"] = _hwm_mib()
        with TestClient(app, base_url="http://127.0.0.1") as client:
            for who in callers:
                headers = {"Authorization": f"Bearer {tokens[who]}"}
                lookups[0] = 0
                cpu = time.process_time()
                r = client.get("/v1/remote/leases", headers=headers)
                cpu = time.process_time() - cpu
                assert r.status_code == 200, r.text
                out[who] = {
                    "cpu_s": round(cpu, 3),
                    "dataset_lookups": lookups[0],
                    # a page {leases, next} since leasepage17; before, the whole list
                    "rows": len(page["leases"] if isinstance(page := r.json(), dict) else page),
                    "next": page.get("next") if isinstance(page, dict) else None,
                    "bytes": len(r.content),
                    "vm_hwm_mib_after": _hwm_mib(),  # the process's peak RSS so far (admin first)
                }
            for who in ("eve", "bob") if targets else ():  # the whole list, following next
                headers, after, requests, rows = {"Authorization": f"Bearer {tokens[who]}"}, "", 0, 0
                cpu = time.process_time()
                while after is not None:
                    page = client.get("/v1/remote/leases", headers=headers, params={"after": after}).json()
                    requests, rows, after = requests + 1, rows + len(page["leases"]), page["next"]
                cpu = time.process_time() - cpu
                out[f"{who}_walk"] = {"cpu_s": round(cpu, 3), "requests": requests, "rows": rows}
        catalog.close()
        return out


def _hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_tree", nargs="?", help="another checkout of the repository (the base)")
    ap.add_argument("--leases", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--targets", type=int, default=0, help="existing datasets 90%% of the leases are bound to"
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(_child(args.child)))
        return
    trees = {"head": HEAD, **({"base": Path(args.base_tree).resolve()} if args.base_tree else {})}
    for r in range(args.rounds):
        order = sorted(trees, reverse=r % 2 == 1)
        for name in order:
            print(f"# {_load()}", flush=True)
            result = run_child(Path(__file__), trees[name], f"{args.leases}:{args.targets}")
            print(json.dumps({"round": r, "tree": name, **result}), flush=True)
    print(f"# {_load()}")


if __name__ == "__main__":
    os.environ.setdefault("DATAHUB_LOG", "warning")
    main()
