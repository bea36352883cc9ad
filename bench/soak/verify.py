"""After the run and the heal: read every listed version end to end on one node.

Run inside a node's namespace by the checker (``python -m bench.soak.verify``). The list of
versions and keys comes from the catalog's database read directly (not from datahub); this
reads each record's bytes through ``datahub://`` and writes their sha256 for the checker to
compare with what it knows independently (the manifest, the writers' acknowledgements, the
origin's own bytes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

from bench.soak.errors import classify


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--plan", required=True, help='JSON: [{"ds": ..., "v": N, "keys": [...]}]')
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from datahub.fs import DatahubFileSystem

    fs = DatahubFileSystem(config_path=args.config, skip_instance_cache=True)
    out = []
    for item in json.loads(Path(args.plan).read_text()):
        for key in item["keys"]:
            result: dict = {"ds": item["ds"], "v": item["v"], "key": key}
            for attempt in range(3):  # after the heal a read must succeed; retries are counted
                t0 = time.monotonic()
                try:
                    data = fs.cat_file(f"{item['ds']}@{item['v']}/{key}")
                except Exception as exc:  # classified; the last one is reported
                    result.update(err=classify(exc), attempts=attempt + 1)
                    time.sleep(1.0)
                    continue
                result.pop("err", None)
                result.update(sha=hashlib.sha256(data).hexdigest(), size=len(data), attempts=attempt + 1)
                result["dt"] = round(time.monotonic() - t0, 4)
                break
            out.append(result)
    Path(args.out).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
