"""The version page's charts of records with no label, in headless Chromium.

The label chart of such records is a note alone ("no labels to count of N records"), a short
picture beside the size histogram; its caption ("label values") stood under the note, half a
line below it, where it read as the note's own caption and sat far above the histogram's
caption beside it. A chart's caption now heads its picture, so each names its chart from
above, empty or not, and the two stand on one line.
"""

from __future__ import annotations

import pytest

from tests.browser.chrome import chrome  # noqa: F401 - the fixture
from tests.browser.conftest import jpeg, put

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BOXES = """
return Array.from(document.querySelectorAll('.charts figure')).map(f => {
  const img = f.querySelector('img').getBoundingClientRect(), cap = f.querySelector('figcaption').getBoundingClientRect();
  return {img: [img.top, img.bottom], cap: [cap.top, cap.bottom], text: f.querySelector('figcaption').textContent};
});
"""


def test_an_empty_label_chart_is_captioned_from_above_as_the_size_chart_is(chrome, env, server) -> None:  # noqa: F811
    c = chrome
    env.catalog.create_dataset("plain", description="records with no label")
    env.catalog.commit("plain", [put(env.objects, f"f/{i}.jpg", jpeg((i * 40, 90, 90))) for i in range(4)])
    c.visit(f"{server}/datasets/plain/versions/1", "newuser33-charts-empty")
    c.driver.execute_script("document.querySelector('.charts').scrollIntoView()")
    c.save_view("newuser33-charts-empty-view")
    figures = c.driver.execute_script(BOXES)
    assert [f["text"] for f in figures] == ["label values", "record sizes"]
    for f in figures:  # each caption above its picture
        assert f["cap"][1] <= f["img"][0] + 0.5, f
    assert abs(figures[0]["cap"][0] - figures[1]["cap"][0]) < 1, figures  # on one line
    c.visit(f"{server}/datasets/pets/versions/2", "newuser33-charts-pets")  # charts with bars: the same
    figures = c.driver.execute_script(BOXES)
    assert all(f["cap"][1] <= f["img"][0] + 0.5 for f in figures), figures
