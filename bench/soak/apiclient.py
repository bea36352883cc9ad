"""An API client on one node: commits, tags, derives and PATCHes through the service's HTTP API.

Run inside the node's namespace by the soak (``python -m bench.soak.apiclient``). Plain
httpx, not datahub's own client: the soak wants the answers as a user's HTTP client sees
them. Commits put records copied from the manifest (objects whose bytes the harness knows),
so the checker can read each committed version end to end and verify every byte. A commit
carries a ``commit_id`` and is retried with it after a connection failure (the documented
way to make a retry safe); every outcome is logged.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from pathlib import Path

import httpx

from bench.soak.errors import classify
from bench.soak.events import EventLog


class Client:
    def __init__(
        self, node: str, url: str, token: str, log: EventLog, records: list[dict], seed: int
    ) -> None:
        self.node, self.log, self.records = node, log, records
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10.0)
        self.rng = random.Random(f"{seed}-{node}-api")
        self.ds = f"api-{node}"
        self.keys: set[str] = set()  # keys of the last version this client committed (when known)
        self.seqs: list[int] = []
        self.created = False

    def _call(self, op: str, method: str, path: str, **kw: object) -> httpx.Response | None:
        t0 = time.monotonic()
        event: dict = {"node": self.node, "api": op}
        resp = None
        try:
            resp = self.http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            event.update(ok=False, err=classify(exc))
        else:
            event["status"] = resp.status_code
            if resp.status_code >= 400:
                try:
                    body = resp.json()
                    code = body["error"]["code"]
                    event.update(ok=False, err=f"http:{resp.status_code}:{code}")
                except (ValueError, KeyError, TypeError):
                    event.update(ok=False, err=f"unexpected:http {resp.status_code} without an error body")
            else:
                event["ok"] = True
        event["dt"] = round(time.monotonic() - t0, 4)
        if resp is not None and resp.status_code < 400 and op == "commit":
            event["seq"] = resp.json()["seq"]
        self.log.write(event, durable=op == "commit")
        return resp if resp is not None and resp.status_code < 400 else None

    def setup(self) -> None:
        """Create the dataset (again, until it answered: the service may be down at first)."""
        body = {"name": self.ds, "description": "soak"}
        resp = self.http_ok_or_exists("create", "POST", "/v1/datasets", json=body)
        self.created = resp

    def http_ok_or_exists(self, op: str, method: str, path: str, **kw: object) -> bool:
        if self._call(op, method, path, **kw) is not None:
            return True
        try:  # a create whose answer was lost (the service died after committing it): 409 now
            return self.http.get(f"/v1/datasets/{self.ds}").status_code == 200
        except httpx.HTTPError:
            return False

    def commit(self) -> None:
        changes = []
        for _ in range(self.rng.randint(1, 5)):
            rec = self.rng.choice(self.records)
            key = f"k{self.rng.randint(0, 40):03d}.bin"
            changes.append({"op": "put", "record": {**rec, "key": key}})
        if self.keys and self.rng.random() < 0.5:
            changes.append({"op": "delete", "key": self.rng.choice(sorted(self.keys))})
        seen, unique = set(), []
        for change in reversed(changes):  # one change per key: the last wins
            key = change.get("key") or change["record"]["key"]
            if key not in seen:
                seen.add(key)
                unique.append(change)
        body = {"message": "soak commit", "changes": unique[::-1], "commit_id": uuid.uuid4().hex}
        for _ in range(3):  # the same commit_id: a retry never commits twice
            resp = self._call("commit", "POST", f"/v1/datasets/{self.ds}/commits", json=body)
            if resp is not None:
                self.seqs.append(resp.json()["seq"])
                for change in unique:
                    if change["op"] == "put":
                        self.keys.add(change["record"]["key"])
                    else:
                        self.keys.discard(change["key"])
                return
            time.sleep(0.5)

    def tag(self) -> None:
        if self.seqs:
            seq = self.rng.choice(self.seqs)
            self._call(
                "tag", "PUT", f"/v1/datasets/{self.ds}/tags/t{self.rng.randint(0, 5)}", json={"ref": seq}
            )

    def derive(self) -> None:
        where = self.rng.choice(["size>50000", "size<20000", "size>1000"])
        ref = self.rng.randint(1, 3)
        body = {"where": where, "to_dataset": f"derived-{self.node}", "message": f"derive {where}"}
        self._call("derive", "POST", f"/v1/datasets/src/versions/{ref}/derive", json=body)

    def patch(self) -> None:
        body = {"description": f"soak {self.rng.random():.6f}"}
        self._call("patch", "PATCH", f"/v1/datasets/{self.ds}", json=body)

    def step(self) -> None:
        if not self.created:
            self.setup()
            return
        op = self.rng.choice([self.commit, self.commit, self.tag, self.derive, self.patch])
        op()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--until", type=float, required=True)
    args = ap.parse_args(argv)
    records = json.loads(Path(args.manifest).read_text())["records"]
    log = EventLog(Path(args.events))
    client = Client(args.node, args.url, Path(args.token_file).read_text().strip(), log, records, args.seed)
    client.setup()
    while time.time() < args.until:
        client.step()
        time.sleep(0.2)
    log.write({"node": args.node, "api": "done", "ok": True}, durable=True)


if __name__ == "__main__":
    main()
