"""The HTTP snapshot API (FastAPI). Build it with ``create_app(config)``; there is no module-level app.

``create_app`` is imported lazily: the CLI uses this package's schemas and access rules
without paying FastAPI's import time on every command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datahub.api.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from datahub.api.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
