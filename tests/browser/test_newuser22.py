"""What a new user met in LabelX with two labelers on one image (newuser22).

An admin opened a task whose annotator had an item open (its claim): the page said only
"Another user is editing this item." (who, and what to do, unsaid, though the server's answer
named them), and the item stayed read-only until a reload, also after the annotator was done
with it: coming back to it asked for nothing again. A save refused for the claim said "item 1
changed since you loaded it (version 0, you had 0) or another user is editing it; reload",
the same version twice and no name.

The version page's "Mount it" line listed the version's top folder (``ls /mnt/pets/pets/v2``)
on a page of ``train/cat/``, whose fsspec URL and PyTorch line name that folder.
"""

from __future__ import annotations

import html
import re
import shlex

import pytest

from datahub.catalog import Put, Record
from labelx.auth import hash_password
from labelx.store import LabelStore
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import Env
from tests.browser.test_newuser16 import _val_project
from tests.browser.test_newuser_labelx import signed_in

pytestmark = [pytest.mark.browser]


def test_an_item_another_labeler_holds_names_them_and_is_taken_once_they_are_done(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    c = chrome
    with signed_in(c, env, "newuser22-lx-login") as base:
        store = LabelStore(env.config.home_path / "labelx.db")  # alice's side: the same labelx.db
        try:
            alice = store.create_user("alice", "annotator", hash_password("alice-password"))
            made = _val_project(c, "val-held", annotator="alice")
            first, second = store.task_items(made["task"])[:2]
            store.claim_item(first.id, alice.id)  # alice has her first item open

            c.driver.get(f"{base}/labelx/tasks/{made['task']}")  # the admin opens alice's task
            c.settle()
            c.until(lambda d: d.find_element("css selector", "#item-key").text == first.key)
            c.until(lambda d: "being edited by alice" in d.find_element("css selector", "#banner").text)
            c.screenshot("newuser22-lx-held")
            assert c.axe() == []
            refused = [e for e in c.driver.get_log("browser") if e["level"] == "SEVERE"]
            assert all(f"/api/items/{first.id}/claim" in e["message"] for e in refused), refused
            c.find("body").send_keys("2")  # read-only meanwhile: nothing is sent over alice's work
            c.until(lambda d: d.find_element("css selector", "#item-key").text == first.key)
            assert store.get_item(first.id).value is None

            # alice labels it cat and moves on; the admin comes back to it
            store.save_value(first.id, alice.id, 0, "cat", "annotated")
            store.release_item(first.id, alice.id)
            c.find("body").send_keys("n")
            c.until(lambda d: d.find_element("css selector", "#item-key").text == second.key)
            c.find("body").send_keys("p")
            c.until(lambda d: d.find_element("css selector", "#item-key").text == first.key)
            c.until(lambda d: not d.find_element("css selector", "#banner").is_displayed())
            assert c.find("#current").text == "Label: cat"  # alice's label, not the page's stale one
            c.check("newuser22-lx-taken")

            c.find("body").send_keys("2")  # dog, over alice's cat at her version: saved
            c.until(lambda d: store.get_item(first.id).value == "dog")
            c.until(
                lambda d: d.find_element("css selector", "#save-state").get_attribute("data-state") == "saved"
            )
            assert store.get_item(first.id).version == 2
            c.check()
        finally:
            store.close()


def test_the_mount_line_of_a_folder_lists_that_folder(env: Env, client) -> None:
    """The fsspec URL and the PyTorch line of a folder's page name the folder; "Mount it" listed
    the version's top folder, and a folder holding a space or a quote must stay one argument."""
    first = env.catalog.get_record("pets", 1, "val/000.jpg")
    env.catalog.create_dataset("odd")
    env.catalog.commit("odd", [Put(Record("my photos/it's/a.jpg", first.url, first.etag, first.size))])
    lines = {}
    for prefix in ("", "my photos/", "my photos/it's/"):
        page = client.get("/datasets/odd/versions/1", params={"prefix": prefix}).text
        code = re.search(r"<code[^>]*>(mkdir -p /mnt/odd [^<]*)</code>", page)
        assert code, page
        lines[prefix] = shlex.split(html.unescape(code.group(1)))
    assert lines[""][-2:] == ["ls", "/mnt/odd/odd/v1"]
    assert lines["my photos/"][-2:] == ["ls", "/mnt/odd/odd/v1/my photos"]
    assert lines["my photos/it's/"][-2:] == ["ls", "/mnt/odd/odd/v1/my photos/it's"]


OVERLAPS = """
const boxes = Array.from(document.querySelectorAll('#lineage .edge-label')).map(t => {
  const r = t.getBoundingClientRect(); const g = t.parentNode.dataset;
  return [`${g.source}->${g.target}:${t.textContent}`, r.left, r.top, r.right, r.bottom];
});
const hit = [];
for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
  const [a, b] = [boxes[i], boxes[j]];
  if (a[1] < b[3] && b[1] < a[3] && a[2] < b[4] && b[2] < a[4]) hit.push([a[0], b[0]]);
}
return [boxes.length, hit];
"""


def test_lineage_edge_labels_never_cover_each_other(chrome: Chrome, env: Env, server: str) -> None:  # noqa: F811
    """Two products of pets@v1 (the second drawn a row down) and the commit chain v1 → v2: the
    product edge's label sat at the middle of its curve, where the chain's label is, one word
    over the other ("labelx" over "derive" on a demo user's dataset page)."""
    env.catalog.derive("pets", 1, "labels.class=cat", to_dataset="cats")
    env.catalog.derive("pets", 1, "labels.class=dog", to_dataset="dogs")
    c = chrome
    c.visit(f"{server}/datasets/pets", "newuser22-lineage-labels")
    count, hits = c.driver.execute_script(OVERLAPS)
    assert count == 3, count  # pets v1 → v2, and the two derives
    assert hits == [], hits
