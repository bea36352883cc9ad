"""What a new user met in the dataset browser (newuser21).

- The lineage graph cut a node's text at its end to 30 characters: every node of a dataset
  named longer than that read the same ``aaaa…`` (no version), its text ran past its box,
  and axe-core reported the link's name (the full ``name@vN``) not holding its visible text.
"""

from __future__ import annotations

import pytest

from datahub.catalog import Put, Record
from tests.browser.chrome import Chrome, chrome  # noqa: F401 - the fixture
from tests.browser.conftest import Env

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
