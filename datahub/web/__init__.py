"""The one way datahub renders HTML: Jinja2 with autoescape, one base layout, one CSP.

Both web UIs, the dataset browser (``datahub.browser``, under ``/``) and LabelX (under
``/labelx/``), render through ``Pages`` and extend ``_base.html``, so escaping, the
Content-Security-Policy, the page's JSON boot block and the head are written once. Pictures
for both come from ``datahub.web.images``.
"""

from datahub.web.render import CSP, Pages, page_headers, security_headers

__all__ = ["CSP", "Pages", "page_headers", "security_headers"]
