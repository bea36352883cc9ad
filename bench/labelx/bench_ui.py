"""Keyboard labeling speed in the real UI (headless Debian Chromium) vs the bare API.

Labels N items of a 500-item task by pressing a class key (each press autosaves and moves
to the next item) and reports items per second and per-item latency until the save is
acknowledged. Baseline, same run and same server: the same N saves as direct HTTP PUTs
from Python (no browser, no rendering) — the floor for a keypress.

    .venv/bin/python bench/labelx/bench_ui.py [--items 200]
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx
import uvicorn
from playwright.sync_api import expect, sync_playwright

from datahub.catalog import Put, Record, open_catalog
from datahub.config import load_config
from datahub.storage import open_store
from labelx.app import create_labelx_app
from labelx.auth import Auth, hash_password

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
TASK = 500


def jpeg() -> bytes:
    from PIL import Image  # only to make test images

    out = io.BytesIO()
    Image.new("RGB", (800, 600), "teal").save(out, "JPEG")
    return out.getvalue()


def run(tmp: Path) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=200)
    n = ap.parse_args().items
    config = load_config(env={}, overrides={"home": str(tmp / "var")})
    objects = open_store((tmp / "objects").as_uri(), config)
    data = jpeg()
    catalog = open_catalog(f"sqlite:///{tmp / 'catalog.db'}")
    catalog.create_dataset("ui")
    puts = []
    for i in range(2 * TASK):
        info = objects.put(f"{i:05d}.jpg", data)
        puts.append(Put(Record(f"{i:05d}.jpg", objects.url_for(f"{i:05d}.jpg"), info.etag, info.size)))
    catalog.commit("ui", puts)
    app = create_labelx_app(config, catalog=catalog)
    lx = app.state.labelx
    admin = lx.store.create_user("admin", "admin", hash_password("benchmark-pass"))
    lx.store.create_user("ann", "annotator", hash_password("benchmark-pass"))
    schema = {"kind": "classification", "classes": ["a", "b", "c"]}
    project = lx.service.create_project(admin, name="ui", dataset="ui", schema=schema, task_size=TASK,
                                        annotators=["ann"])  # fmt: skip
    browser_task, api_task = (t["id"] for t in lx.store.list_tasks(project.id))

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"

    # baseline: the same saves as bare HTTP PUTs (token auth), one after another
    token = Auth(lx.store).new_token(lx.store.user_by_name("ann"), "bench")
    items = lx.store.task_items(api_task)[:n]
    api_lat = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as client:
        for it in items:
            t0 = time.perf_counter()
            r = client.put(f"/api/items/{it.id}", json={"version": it.version, "value": "a"})
            assert r.status_code == 200, r.text
            api_lat.append(time.perf_counter() - t0)

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = b.new_context(viewport={"width": 1360, "height": 860}).new_page()
        page.goto(base + "/login")
        page.fill("#name", "ann")
        page.fill("#password", "benchmark-pass")
        page.click("#login")
        page.wait_for_url(base + "/")
        t_open = time.perf_counter()
        page.goto(f"{base}/tasks/{browser_task}")
        expect(page.locator("#items li:nth-child(1)")).to_have_class("cur", timeout=60_000)
        t_open = time.perf_counter() - t_open
        ui_lat = []
        t_all = time.perf_counter()
        for i in range(n):
            t0 = time.perf_counter()
            page.keyboard.press("2")
            # frame-based polling (wait_for_selector), not expect()'s 100 ms+ retry intervals
            page.wait_for_selector(f"#items li:nth-child({i + 2}).cur", state="attached", timeout=60_000)
            ui_lat.append(time.perf_counter() - t0)
        expect(page.locator("#save-state")).to_have_attribute("data-state", "saved", timeout=60_000)
        t_all = time.perf_counter() - t_all
        # in-page cost of one keypress (handler + next frame), without the driver round trips;
        # this context bypasses the page's CSP only so the measuring script may run
        ctx = b.new_context(viewport={"width": 1360, "height": 860}, bypass_csp=True)
        page2 = ctx.new_page()
        page2.goto(base + "/login")
        page2.fill("#name", "ann")
        page2.fill("#password", "benchmark-pass")
        page2.click("#login")
        page2.wait_for_url(base + "/")
        page2.goto(f"{base}/tasks/{browser_task}#{n}")
        page2.wait_for_selector(f"#items li:nth-child({n + 1}).cur", state="attached", timeout=60_000)
        in_page = page2.evaluate(
            """async (count) => {
                const out = [];
                for (let i = 0; i < count; i++) {
                    const t0 = performance.now();
                    document.body.dispatchEvent(new KeyboardEvent("keydown", { key: "3", bubbles: true }));
                    await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
                    out.push(performance.now() - t0);
                }
                return out;
            }""",
            n,
        )
        expect(page2.locator("#save-state")).to_have_attribute("data-state", "saved", timeout=60_000)
        b.close()
    values = [it.value for it in lx.store.task_items(browser_task)]
    saved = values[:n].count("b") + values[n : 2 * n].count("c")
    server.should_exit = True
    figures = {
        "items_labelled": n,
        "task_size": TASK,
        "open_task_page_s": round(t_open, 3),
        "ui_items_per_s_via_driver": round(n / t_all, 1),
        "ui_keypress_to_next_item_p50_ms": round(1000 * statistics.median(ui_lat), 1),
        "ui_keypress_to_next_item_p95_ms": round(1000 * statistics.quantiles(ui_lat, n=20)[18], 1),
        "baseline_api_put_p50_ms": round(1000 * statistics.median(api_lat), 1),
        "baseline_api_put_p95_ms": round(1000 * statistics.quantiles(api_lat, n=20)[18], 1),
        "ui_vs_api_p50_ratio": round(statistics.median(ui_lat) / statistics.median(api_lat), 2),
        "in_page_keypress_to_next_frame_p50_ms": round(statistics.median(in_page), 1),
        "in_page_keypress_to_next_frame_p95_ms": round(statistics.quantiles(in_page, n=20)[18], 1),
        "all_saved": saved == 2 * n,
    }
    print(json.dumps(figures, indent=2))


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="labelx-ui-"))
    try:
        run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing left behind in /tmp


if __name__ == "__main__":
    main()
