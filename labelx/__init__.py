"""LabelX: labeling service and web UI whose accepted labels become new dataset versions.

``from labelx import create_labelx_app`` (or ``labelx.app``) builds the FastAPI app; the
import is lazy so the CLI and the store do not pull in the web stack.
"""

from typing import Any

__all__ = ["create_labelx_app"]


def __getattr__(name: str) -> Any:
    if name == "create_labelx_app":
        from labelx.app import create_labelx_app

        return create_labelx_app
    raise AttributeError(f"module 'labelx' has no attribute {name!r}")
