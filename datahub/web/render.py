"""Jinja2 pages with autoescape over the shared ``_base.html`` layout.

Why one environment per UI over a shared loader: each UI keeps its own templates next to its
code, while ``_base.html`` (head, stylesheet and script tags, the JSON boot block, the top bar)
comes from here, so a page cannot forget the escaping or put script inline. Every value is
HTML-escaped by autoescape, and shows invisible format characters (bidi overrides) as
``⟨U+202E⟩``; data a page's script needs goes into ``<script type=
"application/json">`` through the ``boot`` filter, which also escapes ``<`` so no string can
close the block. No inline script or style exists anywhere, so the strict CSP holds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import ChoiceLoader, Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from datahub.validation import visible

BASE_TEMPLATES = Path(__file__).parent / "templates"
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


# A page (and its redirects and error pages) is never kept by the browser or a proxy: a history
# navigation shows a kept page without asking the server, so the back button after "Sign out"
# showed the signed-out person's datasets on a shared machine once the page had left the
# back/forward cache (caller34). Pictures and charts say their own (immutable, private).
PAGE_CACHE = {"Cache-Control": "no-store"}


def security_headers() -> dict[str, str]:
    """The headers every HTML response of both UIs carries (a copy: callers may add to it)."""
    return dict(SECURITY_HEADERS)


def page_headers() -> dict[str, str]:
    """A page's headers: the security headers and ``Cache-Control: no-store`` (``PAGE_CACHE``)."""
    return {**SECURITY_HEADERS, **PAGE_CACHE}


def boot_json(value: Any) -> Markup:
    """JSON for a ``<script type="application/json">`` block: every ``<`` is written ``\\u003c``,
    so no string in it can end the block (``</script>``) or open a comment (``<!--``)."""
    return Markup(json.dumps(value, sort_keys=True).replace("<", "\\u003c"))


def shown(value: Any) -> Any:
    """Every ``{{ … }}`` goes through here (the environment's ``finalize``): a string shows its
    invisible format characters (``⟨U+202E⟩``), so a legacy key or a label cannot display as
    another text; escaping alone keeps them. Markup (``boot``, ``verbatim``) is left alone."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value)
    return value


def verbatim(value: Any) -> Markup:
    """A form value sent back as it is (a folder's prefix, a search): escaped, never rewritten
    by ``shown``, so the next request names the same folder."""
    return escape(value)


def code_spans(value: Any) -> Markup:
    """A message whose commands are between backticks (`datahub log pets`, as the CLI prints
    it) with those as ``<code>``, so a page shows no literal backticks; an odd count of
    backticks is not a pairing and the text is left as it is. Escaped, through ``shown``."""
    parts = str(value).split("`")
    if len(parts) % 2 == 0:
        return escape(shown(str(value)))
    return Markup("").join(
        Markup("<code>{}</code>").format(shown(part)) if i % 2 else escape(shown(part))
        for i, part in enumerate(parts)
    )


def urlpath(value: str) -> str:
    """A record key or a name as a URL path: every character but ``/`` percent-escaped."""
    return quote(str(value), safe="/")


def urlpart(value: str) -> str:
    """A value as one URL path segment or query value (``/`` escaped too)."""
    return quote(str(value), safe="")


class Pages:
    """A Jinja2 environment over one UI's templates plus the shared base layout."""

    def __init__(self, templates: Path, globals: Mapping[str, Any] | None = None) -> None:
        self.env = Environment(
            loader=ChoiceLoader([FileSystemLoader(str(templates)), FileSystemLoader(str(BASE_TEMPLATES))]),
            autoescape=select_autoescape(default=True, default_for_string=True),
            undefined=StrictUndefined,  # a misspelt name is an error in tests, not an empty string
            trim_blocks=True,
            lstrip_blocks=True,
            finalize=shown,
        )
        self.env.filters.update(
            boot=boot_json, code_spans=code_spans, urlpath=urlpath, urlpart=urlpart, verbatim=verbatim
        )
        self.env.globals.update(globals or {})

    def render(self, template: str, /, **values: Any) -> str:
        return self.env.get_template(template).render(**values)
