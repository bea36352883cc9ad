"""The soak's report as text (the JSON is the report dict itself)."""

from __future__ import annotations

from collections import Counter


def text(report: dict) -> str:
    lines = [
        f"chaos soak: seed {report['seed']}, {report['seconds']:.0f} s of faults "
        f"(setup {report.get('setup_seconds', '?')} s, wall {report.get('wall_seconds', '?')} s)",
    ]
    if report.get("phases"):
        lines.append("phases (s): " + ", ".join(f"{k} {v}" for k, v in report["phases"].items()))
    faults = report.get("faults", [])
    kinds = Counter(f["kind"] for f in faults)
    lines.append(
        f"faults injected: {len(faults)} of {len(kinds)} kinds: "
        + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
    )
    for f in faults:
        state = f"healed at {f['healed_at']:.1f}" if f["healed_at"] else f"NOT HEALED {f['error']}"
        lines.append(
            f"  {f['at']:8.2f} s  {f['kind']:<16} {f['target']:<8} {f['seconds']:5.2f} s  hit {f['hit'] or '-'}; {state}"
        )
    r = report.get("reads", {})
    if r:
        lines.append(
            f"reads: {r['reads']} ({r['verified']} verified, {r['bytes_verified']} bytes; by node {r['by_node']}); "
            f"wrong bytes {r['wrong']}; longest read {r['longest_read_seconds']:.2f} s ({r['longest_read']})"
        )
        lines.append(f"read errors by kind: {r['errors'] or 'none'}")
    w = report.get("writes", {})
    if w:
        lines.append(
            f"writes: {w['acknowledged']} acknowledgements logged; {w['files_checked']} workspace files checked "
            f"in committed versions; longest operation {w['longest_operation_seconds']:.2f} s ({w['longest_operation']})"
        )
        lines.append(f"write errors by kind: {w['errors'] or 'none'}")
    a = report.get("api", {})
    if a:
        lines.append(f"API calls: {a['calls']}; errors: {a['errors'] or 'none'}")
    c = report.get("catalog", {})
    if c:
        lines.append(
            f"catalog: {c['datasets']} datasets, {c['versions']} versions ({c['versions_read_end_to_end']} read end "
            f"to end, {c['bytes_read_end_to_end']} bytes), {c['tags']} tags"
        )
    s = report.get("supervisors", {})
    if s:
        lines.append(
            f"workspace cycles {s['workspace_cycles']}, commit attempts {s['workspace_commit_attempts']}; "
            f"pack jobs finished {len(s['pack_jobs_finished'])}, worker exits {s['pack_worker_exits']}; "
            f"mount starts {s['mount_starts']}"
        )
    for note in report.get("notes", []):
        lines.append(f"note: {note}")
    lines.append(f"leaks: {report.get('leaks')}")
    bad = report.get("violations", [])
    lines.append(f"VIOLATIONS: {len(bad)}" if bad else "violations: none")
    lines += [f"  - {v}" for v in bad[:200]]
    return "\n".join(lines)
