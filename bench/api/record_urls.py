"""What the record-URL rule (datahub.api.record_urls) costs a commit over HTTP, A/B in one run.

    .venv/bin/python bench/api/record_urls.py [--puts 20000] [--rounds 3]

The real app (authentication on) over a fresh SQLite catalog, driven in-process by a
TestClient, so ``time.process_time`` counts client, server and catalog alike. Each round
commits ``--puts`` new records to a fresh dataset three ways, in alternation:

- ``admin``  (baseline): a global admin's commit, which the rule passes untouched;
- ``prefix``: a writer's commit whose URLs are all under the dataset's ``sources`` (rule 1,
  one ``startswith`` per URL);
- ``admin-relabel`` (baseline of the next): a global admin re-puts every record of the head
  with new labels;
- ``relabel``: a writer does the same, under no source, so each put is proven by the
  batched lookup by key (rule 3), one lookup per 512 changes.

Then the URL check alone, 200,000 URLs: ``under`` as it is (one ``startswith`` for a URL
without ``%``) against parsing each URL with ``split_object_url`` first (what a URL with
``%`` costs, and what every URL cost in the rule's first version).

Prints CPU microseconds per put (median of the rounds) and the load average. Wall time on
this shared machine is noise; CPU per put is the figure to compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from datahub.api import create_app
from datahub.api.tokens import issue_token
from datahub.catalog import open_catalog
from datahub.config import load_config

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def changes(dataset: str, n: int, labels: dict | None = None) -> list[dict]:
    return [
        {
            "op": "put",
            "record": {
                "key": f"train/{i:07d}.jpg",
                "url": f"s3://platform/{dataset}/train/{i:07d}.jpg",
                "etag": f"e{i}",
                "size": 1000 + i,
                "labels": labels or {"class": "cat"},
            },
        }
        for i in range(n)
    ]


def cpu(client: TestClient, token: str, dataset: str, body: list[dict]) -> float:
    start = time.process_time()
    resp = client.post(
        f"/v1/datasets/{dataset}/commits",
        json={"changes": body},
        headers={"Authorization": f"Bearer {token}"},
    )
    spent = time.process_time() - start
    assert resp.status_code == 201, resp.text[:300]
    return spent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--puts", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        config = load_config(env={}, overrides={"home": tmp, "api": {"local_mode": False}})
        catalog = open_catalog(config.resolved_catalog_url)
        admin = issue_token(catalog.store, "root", admin=True)[0]
        bob = issue_token(catalog.store, "bob")[0]
        figures: dict[str, list[float]] = {"admin": [], "prefix": [], "admin-relabel": [], "relabel": []}
        with TestClient(create_app(config, catalog=catalog), base_url="http://127.0.0.1") as client:
            for r in range(args.rounds):
                for way in figures:  # alternation: each round runs all three, in turn
                    name = f"{way}-{r}"
                    catalog.create_dataset(name, owner="root", acl={"bob": "writer"})
                    if way == "prefix":
                        catalog.update_dataset(name, sources=[f"s3://platform/{name}/"])
                    relabel = way.endswith("relabel")
                    if relabel:  # the head the re-puts replace (and the writer's are proven against)
                        cpu(client, admin, name, changes(name, args.puts))
                    body = changes(name, args.puts, {"class": "dog"} if relabel else None)
                    spent = cpu(client, admin if way.startswith("admin") else bob, name, body)
                    figures[way].append(spent / args.puts * 1e6)
        catalog.close()
    print(f"load average {os.getloadavg()}; {args.puts} puts per commit, {args.rounds} rounds")
    for way, values in figures.items():
        baseline = "admin-relabel" if way == "relabel" else "admin"
        median, base = statistics.median(values), statistics.median(figures[baseline])
        print(
            f"{way:13s} CPU us/put median {median:6.1f}  ({', '.join(f'{v:.1f}' for v in values)})"
            f"  vs {baseline} {median / base:.3f}x"
        )
    micro()
    return 0


def micro(n: int = 200_000) -> None:
    from datahub.catalog.sources import under
    from datahub.storage import split_object_url

    urls = [f"s3://platform/pets/train/{i:07d}.jpg" for i in range(n)]
    prefixes = ("s3://platform/pets/",)

    def parsed(url: str) -> bool:
        root, key = split_object_url(url)
        return f"{root}/{key}".startswith(prefixes)

    for name, check in (("under", under), ("parse first", parsed)) * 2:  # alternated, twice
        start = time.process_time()
        found = sum(check(u, prefixes) if check is under else check(u) for u in urls)
        spent = time.process_time() - start
        print(f"{name:12s} {spent / n * 1e6:.2f} us CPU per URL ({found} of {n} under the prefix)")


if __name__ == "__main__":
    sys.exit(main())
