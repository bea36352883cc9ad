"""newuser44: LabelX's dashboard in a 400 px window, in headless Chromium.

At 400 px the charts' SVGs were drawn 240 units wide at least and scaled down to the card, so
their 11 px words shrank to 7-8 px; an annotator's name longer than the chart's fixed 110-unit
name column ran off its left edge ("…-annotator" with the start cut); the throughput chart's
hour labels ran into each other. The task table's state cell showed its pills side by side
past the cell. Now a chart is drawn at the card's own width (its words at their size), the name
column is as wide as the longest name up to half the chart and a longer name is cut with an
ellipsis (its whole name in the tooltip and the picture's words), the hour axis labels as many
hours as fit, and the state pills wrap within their cell. newuser73: the commit form's "Into
dataset" placeholder was cut ("(same dataset: new ve"): that field now has the form's full width.
"""

from __future__ import annotations

import pytest

from tests.browser.chrome import Chrome, chrome  # noqa: F401
from tests.browser.conftest import Env
from tests.browser.labelx_signin import signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LONG = "annotator-with-a-long-name"
# users, a project of pets' 23 pictures in tasks of 5 round-robin over four annotators, some
# items labelled, one task submitted and reviewed (accepted and rejected): every state shows
WORK = """
const done = arguments[arguments.length - 1];
(async () => {
  for (const name of ['ann', 'bo', LONG])
    await api('POST', '/api/users', {name, role: 'annotator', password: 'pw-' + name + '-123456'});
  const p = await api('POST', '/api/projects', {name: 'narrow', dataset: 'pets', task_size: 5,
    annotators: ['admin', 'ann', 'bo', LONG], schema: {kind: 'classification', classes: ['cat', LONG_CLASS, 'bird']}});
  const tasks = await api('GET', `/api/projects/${p.id}/tasks`);
  const first = await api('GET', `/api/tasks/${tasks[0].id}`);
  for (const [i, it] of first.items.entries()) await api('PUT', `/api/items/${it.id}`, {version: it.version, value: i % 2 ? LONG_CLASS : 'cat'});
  await api('POST', `/api/tasks/${tasks[0].id}/submit`);
  for (const [i, it] of (await api('GET', `/api/projects/${p.id}/review`)).entries())
    await api('POST', `/api/items/${it.id}/review`, {version: it.version, accept: i !== 1, comment: i === 1 ? 'no' : ''});
  return p.id;
})().then(done, e => done(String(e)));
""".replace("LONG_CLASS", repr("a-class-with-a-rather-long-name")).replace("LONG", repr(LONG))

# every text of each chart: its box against the chart's, and against the texts beside it
TEXTS = """
const out = [];
for (const svg of document.querySelectorAll(arguments[0] + ' svg')) {
  const box = svg.getBoundingClientRect();
  const texts = Array.from(svg.querySelectorAll('text')).map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom,
            size: parseFloat(getComputedStyle(t).fontSize) * box.width / svg.viewBox.baseVal.width};
  });
  out.push({left: box.left, right: box.right, texts});
}
return out;
"""

# the visible inputs whose placeholder is wider than the room for text in them
PLACEHOLDERS_CUT = """
const ctx = document.createElement('canvas').getContext('2d'), out = [];
for (const i of document.querySelectorAll('input[placeholder]')) {
  if (!i.offsetParent) continue;
  const cs = getComputedStyle(i);
  ctx.font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
  const room = i.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  const needs = ctx.measureText(i.placeholder).width;
  if (needs > room + 0.5) out.push([i.name, i.placeholder, Math.round(needs), Math.round(room)]);
}
return out;
"""


def _overlap(a: dict, b: dict) -> bool:
    return (
        a["left"] < b["right"] - 0.5
        and b["left"] < a["right"] - 0.5
        and a["top"] < b["bottom"] - 0.5
        and b["top"] < a["bottom"] - 0.5
    )


def test_the_dashboard_reads_in_a_400_px_window(chrome: Chrome, env: Env) -> None:  # noqa: F811
    c = chrome
    with signed_in(c, env) as base:
        project = c.driver.execute_async_script(WORK)
        assert isinstance(project, int), project
        c.driver.set_window_size(400, 900)  # the charts are drawn at the width the page opens in
        c.visit(f"{base}/labelx/projects/{project}")
        c.until(lambda d: d.find_elements("css selector", "#tasks table tr td"))
        c.check()  # no console error, no axe-core violation at 400 px (a shot would resize the window)
        for css in ("#chart-annotators", "#chart-classes", "#chart-hours"):
            for chart in c.driver.execute_script(TEXTS, css):
                texts = chart["texts"]
                assert texts, css
                for t in texts:  # inside the chart, at a size that reads
                    assert chart["left"] - 0.5 <= t["left"] and t["right"] <= chart["right"] + 0.5, (
                        css,
                        t,
                        chart,
                    )
                    assert t["size"] >= 10.5, (css, t)
                clash = [
                    (a["text"], b["text"])
                    for i, a in enumerate(texts)
                    for b in texts[i + 1 :]
                    if _overlap(a, b)
                ]
                assert clash == [], (css, clash)
        # a long name keeps its start, cut with an ellipsis; its whole name is its tooltip
        names = c.driver.execute_script(
            "return Array.from(document.querySelectorAll('#chart-classes svg text.name'),"
            " t => [t.firstChild.textContent, t.querySelector('title') && t.querySelector('title').textContent])"
        )
        shown, whole = next((n, t) for n, t in names if n.startswith("a-class"))
        assert shown.endswith("…") and whole == "a-class-with-a-rather-long-name", names
        # the state pills stay within their cell, wrapping when they need to
        cells = c.driver.execute_script(
            "return Array.from(document.querySelectorAll('#tasks td.states')).map(td => {"
            " const r = td.getBoundingClientRect();"
            " return Array.from(td.querySelectorAll('.pill')).every(p => {"
            "  const q = p.getBoundingClientRect(); return q.left >= r.left - 0.5 && q.right <= r.right + 0.5; }); })"
        )
        assert cells and all(cells), cells
        c.driver.execute_script("document.getElementById('chart-annotators').scrollIntoView()")
        c.save_view("newuser44-dashboard-400-charts")
        c.driver.execute_script("document.getElementById('tasks').scrollIntoView()")
        c.save_view("newuser44-dashboard-400-tasks")
        wide = c.driver.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth,"
            " Array.from(document.querySelectorAll('body *')).filter(e => e.getBoundingClientRect().right >"
            " document.documentElement.clientWidth + 0.5).map(e => e.tagName + '.' + e.className + '#' + e.id)]"
        )
        assert wide[0] <= wide[1], wide  # the page never scrolls sideways
        # every placeholder is read whole: "Into dataset" showed "(same dataset: new ve" (newuser73)
        cut = c.driver.execute_script(PLACEHOLDERS_CUT)
        assert cut == [], cut
