"""A box resized against the picture's edge is saved, inside the picture.

Resizing keeps a box at least 0.002 wide and high; a handle pulled onto the opposite edge at the
picture's border gave x = 0.999, w = 0.002: x + w > 1, which the server refuses (400), so the
save failed and the box was lost (labelx43's report). The page now keeps such a box inside.
"""

from __future__ import annotations

import pytest

from tests.labelx.test_browser import browser, login, poll, server, wait_saved  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_handle_pulled_past_the_opposite_edge_at_the_border_saves_a_box_inside(app, env, server, browser):  # noqa: F811
    service, store = app.state.labelx.service, app.state.labelx.store
    det = service.create_project(
        store.user_by_name("admin"), name="edge-det", dataset="pets", prefix="img/0011", task_size=5,
        annotators=["alice"], schema={"kind": "detection", "classes": ["cat", "dog"]},
    )  # fmt: skip
    task = store.list_tasks(det.id)[0]["id"]
    page = login(browser, server, "alice")
    page.goto(f"{server}/tasks/{task}")
    page.wait_for_selector(".cls")
    page.locator("#image").wait_for()
    page.keyboard.press("2")
    box = page.locator("#overlay").bounding_box()
    x0, y0, w, h = box["x"], box["y"], box["width"], box["height"]
    # a box from (0.80, 0.20) to the right border (the pointer past it is clamped to 1.0)
    page.mouse.move(x0 + 0.80 * w, y0 + 0.20 * h)
    page.mouse.down()
    page.mouse.move(x0 + 0.95 * w, y0 + 0.35 * h, steps=5)
    page.mouse.move(x0 + 1.10 * w, y0 + 0.40 * h, steps=5)
    page.mouse.up()
    wait_saved(page)
    item = store.task_items(task)[0]
    assert abs(item.value[0]["bbox"][0] + item.value[0]["bbox"][2] - 1.0) < 1e-6
    # select it (a click on its middle), then pull its top-left handle right, over the fixed
    # right edge and past the border
    page.mouse.click(x0 + 0.90 * w, y0 + 0.30 * h)
    page.wait_for_selector("#overlay rect.handle")
    corner = page.locator('#overlay rect[data-corner="0"]').bounding_box()
    page.mouse.move(corner["x"] + corner["width"] / 2, corner["y"] + corner["height"] / 2)
    page.mouse.down()
    page.mouse.move(x0 + 1.00 * w, y0 + 0.30 * h, steps=5)
    page.mouse.move(x0 + 1.20 * w, y0 + 0.30 * h, steps=5)
    page.mouse.up()

    def resized() -> bool:
        value = store.task_items(task)[0].value
        return bool(value) and value[0]["bbox"][0] > 0.9

    assert poll(resized), store.task_items(task)[0].value  # the save was refused: the old box stayed
    wait_saved(page)
    bx, by, bw, bh = store.task_items(task)[0].value[0]["bbox"]
    assert bw > 0 and bh > 0 and bx + bw <= 1.0 and by + bh <= 1.0
