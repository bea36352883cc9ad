"""What a new user met in the dataset browser (newuser21).

- The lineage graph cut a node's text at its end to 30 characters: every node of a dataset
  named longer than that read the same ``aaaa…`` (no version), its text ran past its box,
  and axe-core reported the link's name (the full ``name@vN``) not holding its visible text.
- LabelX's review page took Enter as "accept the current card" wherever the focus was: a
  reviewer who typed why a label is wrong and tabbed to "Reject" accepted it with Enter, and
  Enter on "Cancel" (focused when "Accept all shown" asks) accepted the current card.
- A LabelX session that ended (12 h) sent the page's next request to the login form and from
  there to the project list, away from the task or project the person was on.
- The dashboard's "Commit over" box stayed ticked after the commit it was ticked for: the next
  commit from the page replaced labels changed at the head since, without the refusal.
"""

from __future__ import annotations

import pytest

from datahub.catalog import Put, Record
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import Env
from tests.browser.labelx_signin import drop_labelx_session
from tests.browser.test_newuser16 import _all_dog_and_submitted, _val_project
from tests.browser.test_newuser_labelx import signed_in

pytestmark = [pytest.mark.browser]
LONG = "imagenet-2012-train-resized-224-center-crop-quality-90-shards"  # 61 of 63 characters

NODES = """
return Array.from(document.querySelectorAll('#lineage a.node')).map(a => {
  const r = a.querySelector('rect').getBoundingClientRect(), t = a.querySelector('text').getBoundingClientRect();
  return [a.dataset.node, a.querySelector('text').textContent, t.left >= r.left && t.right <= r.right];
});
"""


def test_a_long_named_dataset_s_lineage_nodes_name_their_versions_inside_their_boxes(
    chrome: Chrome,  # noqa: F811
    env: Env,
    server: str,
) -> None:
    first = env.catalog.get_record("pets", 1, "val/000.jpg")
    env.catalog.create_dataset(LONG)
    for i in range(3):
        env.catalog.commit(
            LONG, [Put(Record(f"k{i}.jpg", first.url, first.etag, first.size))], message=f"c{i}"
        )
    chrome.visit(f"{server}/datasets/{LONG}", "newuser21-long-lineage")  # axe-core: names hold their text
    nodes = chrome.driver.execute_script(NODES)
    assert [n for n, _, _ in nodes] == [f"{LONG}@v{i}" for i in (1, 2, 3)], nodes
    for node, text, inside in nodes:
        assert text.endswith(node[node.rindex("@") :]), nodes  # its own version, not "…"
        assert inside, f"{text!r} runs past its box"
    assert len({text for _, text, _ in nodes}) == 3
    # the full name stays the node's tooltip and the list under the graph names it
    assert chrome.find("#lineage a.node title").get_attribute("textContent") == f"{LONG}@v1"
    assert f"{LONG}@v1 → {LONG}@v2" in chrome.find("#lineage-edges").text


CLASS_OF = "const n = document.querySelector(arguments[0]); return n && n.className;"


def _statuses(c: Chrome, task: int) -> dict[str, tuple[str, str | None]]:
    items = c.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "api('GET', `/api/tasks/${arguments[0]}`).then(v => done(v.items), e => done(String(e)));",
        task,
    )
    return {i["key"]: (i["status"], i["comment"]) for i in items}


def test_review_enter_commit_over_and_a_new_sign_in_on_labelx_pages(
    chrome: Chrome,  # noqa: F811
    env: Env,
) -> None:
    from selenium.webdriver.common.keys import Keys  # after tests.browser.chrome: it skips without selenium

    c = chrome
    with signed_in(c, env, "newuser21-lx-login") as base:
        made = _val_project(c, "val-enter")
        items = _all_dog_and_submitted(c, made["task"])
        review = f"{base}/labelx/projects/{made['id']}/review"
        c.visit(review)
        c.until(lambda d: len(d.find_elements("css selector", ".rcard")) == len(items))
        first = c.driver.execute_script("return document.querySelector('.rcard').dataset.item")
        comment = c.find(f'.rcard[data-item="{first}"] [data-comment]')
        comment.send_keys("a bird, not a dog")
        comment.send_keys(Keys.TAB)
        assert c.driver.switch_to.active_element.text == "Reject"
        c.driver.switch_to.active_element.send_keys(Keys.ENTER)
        card = f'.rcard[data-item="{first}"]'
        decided = c.until(
            lambda d: {"accepted", "rejected"} & set((d.execute_script(CLASS_OF, card) or "").split())
        )
        assert decided == {"rejected"}  # it was accepted
        assert _statuses(c, made["task"])[first] == ("rejected", "a bird, not a dog")

        open_ = len(items) - 1
        c.find("#accept-all").click()
        c.until(lambda d: d.switch_to.active_element.get_attribute("id") == "accept-all-no")
        c.driver.switch_to.active_element.send_keys(Keys.ENTER)  # Cancel: nothing accepted
        c.until(lambda d: d.find_element("css selector", "#accept-all").is_displayed())
        assert c.find("#count").text == f"{open_} waiting"
        assert [s for s, _ in _statuses(c, made["task"]).values()].count("submitted") == open_
        c.check("newuser21-lx-review-cancelled")
        c.find("#accept-all").click()
        c.find("#accept-all-yes").click()
        c.until(lambda d: d.find_element("css selector", "#count").text == "0 waiting")

        c.visit(f"{base}/labelx/projects/{made['id']}")
        c.until(lambda d: d.find_elements("css selector", "#tasks table"))
        c.find("#commit-overwrite").click()
        c.find("#commit-btn").click()
        c.until(lambda d: d.find_element("css selector", "#commit-msg").get_attribute("data-version"))
        assert c.find("#commit-msg").text.startswith(f"Committed pets@v3 ({open_} records changed)")
        assert not c.find("#commit-overwrite").is_selected()
        c.check("newuser21-lx-committed")

        # the session ends (12 h): the page's next request signs in again and comes back here
        password = (env.config.home_path / "labelx-admin-password").read_text().strip()
        drop_labelx_session(c)
        # a commit into a new dataset: onto pets nothing is left, and the button says so,
        # disabled (newuser33); any request of the page's does
        c.find("#commit-form [name=to_dataset]").send_keys("pets-again")
        c.find("#commit-btn").click()
        c.wait_for_url(lambda url: "/labelx/login?" in url)
        assert c.driver.current_url.endswith(f"/labelx/login?next=%2Fprojects%2F{made['id']}")
        c.find("#name").send_keys("admin")
        c.find("#password").send_keys(password)
        c.find("#login").click()
        c.wait_for_url(lambda url: url.endswith(f"/labelx/projects/{made['id']}"))
