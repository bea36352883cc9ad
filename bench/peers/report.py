#!/usr/bin/env python3
"""Turn run_bench.py JSONL output into markdown tables (medians over reps).

./report.py results/raw-2026-11-21.jsonl > results-2026-11-21.md
"""

import argparse
import json
import statistics
from collections import defaultdict

METRIC = {  # workload -> (result key, unit label, format)
    "epoch": ("files_per_s", "files/s", "{:.0f}"),
    "listing": ("seconds", "s", "{:.2f}"),
    "large_seq": ("mib_per_s", "MiB/s", "{:.0f}"),
    "large_rand": ("reads_per_s", "reads/s", "{:.1f}"),
    "torch": ("images_per_s", "img/s", "{:.0f}"),
}
WORKLOADS = list(METRIC)


def load(paths):
    recs, meta = [], []
    for p in paths:
        with open(p) as f:
            for line in f:
                r = json.loads(line)
                (meta if r.get("meta") else recs).append(r)
    return recs, meta


def med(xs):
    return statistics.median(xs) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl", nargs="+")
    a = ap.parse_args()
    recs, meta = load(a.jsonl)
    configs = list(dict.fromkeys(r["config"] for r in recs))
    g = defaultdict(list)
    for r in recs:
        g[(r["config"], r["workload"], r["phase"])].append(r)

    def cell(cfg, w, ph, fn, fmt, spread=False):
        rs = [r for r in g.get((cfg, w, ph), []) if r["result"].get("ok")]
        errs = [r for r in g.get((cfg, w, ph), []) if not r["result"].get("ok")]
        if not rs:
            return "err" if errs else "–"
        vals = [v for v in (fn(r) for r in rs) if v is not None]
        if not vals:
            return "–"
        s = fmt.format(med(vals))
        if spread and len(vals) > 1:
            s += f" [{fmt.format(min(vals))}–{fmt.format(max(vals))}]"
        capped = sum(bool(r["result"].get("capped")) for r in rs)
        return s + ("†" if capped else "") + (f" (n={len(rs)})" if len(rs) != 3 else "")

    out = []
    if meta:
        m = meta[0]
        out.append(
            f"Versions: {json.dumps(m.get('versions'))}; kernel {m.get('uname')}; {m.get('cpus')} CPUs; endpoint {m.get('endpoint')}\n"
        )
    out.append(
        "## Throughput (median of reps; cold = fresh mount + empty cache + dropped page cache, warm = 2nd pass)\n"
    )
    hdr = "| config | " + " | ".join(f"{w} {METRIC[w][1]} cold | warm" for w in WORKLOADS) + " |"
    out.append(hdr)
    out.append("|" + "---|" * (1 + 2 * len(WORKLOADS)))
    for c in configs:
        row = [c]
        for w in WORKLOADS:
            k, _, fmt = METRIC[w]
            for ph in ("cold", "warm"):
                row.append(cell(c, w, ph, lambda r, k=k: r["result"].get(k), fmt, spread=True))
        out.append("| " + " | ".join(row) + " |")
    out.append(
        "\n[min–max] over reps. † = at least one rep hit its time limit; the rate is over the work done before the limit. "
        "(n=k) = number of good reps when not 3. listing is seconds (lower is better); all others higher is better.\n"
    )

    out.append("## S3 requests per pass (median): GET/HEAD/LIST (4xx)\n")
    out.append("| config | " + " | ".join(f"{w} cold | warm" for w in WORKLOADS) + " |")
    out.append("|" + "---|" * (1 + 2 * len(WORKLOADS)))
    for c in configs:
        row = [c]
        for w in WORKLOADS:
            for ph in ("cold", "warm"):
                rs = [r for r in g.get((c, w, ph), []) if r.get("requests")]
                if not rs:
                    row.append("–")
                    continue
                q = {k: med([r["requests"][k] for r in rs]) for k in ("GET", "HEAD", "LIST", "4xx")}
                row.append(
                    f"{q['GET']:.0f}/{q['HEAD']:.0f}/{q['LIST']:.0f}"
                    + (f" ({q['4xx']:.0f})" if q["4xx"] else "")
                )
        out.append("| " + " | ".join(row) + " |")
    out.append("\nCapped passes issue fewer requests than a full pass would.\n")

    out.append("## CPU seconds per pass (median): mount daemon / S3 endpoint (moto) / workload process\n")
    out.append("| config | " + " | ".join(f"{w} cold | warm" for w in WORKLOADS) + " |")
    out.append("|" + "---|" * (1 + 2 * len(WORKLOADS)))
    for c in configs:
        row = [c]
        for w in WORKLOADS:
            for ph in ("cold", "warm"):
                rs = [r for r in g.get((c, w, ph), []) if r.get("cpu_s")]
                if not rs:
                    row.append("–")
                    continue
                parts = []
                for k in ("daemon", "endpoint", "workload"):
                    vals = [r["cpu_s"][k] for r in rs if r["cpu_s"].get(k) is not None]
                    parts.append("-" if not vals else f"{med(vals):.1f}")
                row.append("/".join(parts))
        out.append("| " + " | ".join(row) + " |")

    extra = []
    for c in configs:
        for w in ("epoch", "large_rand"):
            for ph in ("cold", "warm"):
                rs = [
                    r
                    for r in g.get((c, w, ph), [])
                    if r["result"].get("ok") and r["result"].get("lat_p50_ms")
                ]
                if rs:
                    extra.append(
                        f"| {c} | {w} | {ph} | {med([r['result']['lat_p50_ms'] for r in rs]):.1f} | "
                        f"{med([r['result']['lat_p99_ms'] for r in rs]):.1f} |"
                    )
    if extra:
        out.append("\n## Per-read latency (median over reps of p50 / p99, ms)\n")
        out.append("| config | workload | phase | p50 ms | p99 ms |\n|---|---|---|---|---|")
        out.extend(extra)

    cache = []
    for c in configs:
        for w in WORKLOADS:
            rs = [r for r in g.get((c, w, "warm"), []) if "cache_bytes" in r]
            if rs:
                cache.append(f"{c}/{w}: {med([r['cache_bytes'] for r in rs]) / 2**20:.0f} MiB")
    if cache:
        out.append("\nCache dir size after the warm pass (median): " + "; ".join(cache))
    [r.get("mount_s") for r in recs if r.get("mount_s") is not None]
    drops = [r.get("drop_caches") for r in recs if "drop_caches" in r]
    if drops:
        out.append(f"\ndrop_caches succeeded in {sum(drops)}/{len(drops)} cold passes.")
    print("\n".join(out))


if __name__ == "__main__":
    main()
