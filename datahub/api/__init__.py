"""The HTTP snapshot API (FastAPI). Build it with ``create_app(config)``; there is no module-level app."""

from datahub.api.app import create_app

__all__ = ["create_app"]
