"""A version page's one-line snippets in a narrow window (newuser44).

The "Mount it" command wrapped where the window ended, and a browser may break a line after any
hyphen: at 400 px it read "mkdir -" above "p /mnt/pets && …" or "--" above "background", which
looks like another command. A one-line snippet is now one line, scrolled inside its own box (as
the PyTorch script is), and the page itself still never scrolls sideways.
"""

from __future__ import annotations

import pytest

from tests.browser.chrome import chrome  # noqa: F401 - the fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# each one-line snippet: how many lines its text covers, and whether its box can scroll
LINES = """return Array.from(document.querySelectorAll('.snippet code')).map(code => {
  const r = document.createRange(); r.selectNodeContents(code);
  const tops = new Set(Array.from(r.getClientRects(), c => Math.round(c.top)));
  return [code.textContent, tops.size, code.scrollWidth > code.clientWidth, code.tabIndex];
})"""


def test_a_one_line_snippet_never_wraps_at_its_hyphens(chrome, env, server) -> None:  # noqa: F811
    c = chrome
    for width in (360, 400, 1360):
        c.driver.set_window_size(width, 900)
        c.visit(server + "/datasets/pets/versions/1")
        c.save_view(f"newuser44-snippets-{width}")
        found = c.driver.execute_script(LINES)
        assert [t for t, *_ in found if t.startswith("mkdir -p /mnt/pets && ")], found
        for text, lines, scrolls, tab in found:
            assert lines == 1, (width, text)  # never broken across lines, at a hyphen or anywhere
            assert tab == 0, text  # a box that may scroll is reachable with the keyboard
            if width <= 400 and text.startswith("mkdir"):
                assert scrolls, (width, text)  # the rest is inside its box, not cut off
        wide = c.driver.execute_script(
            "return document.documentElement.scrollWidth <= document.documentElement.clientWidth"
        )
        assert wide, width
