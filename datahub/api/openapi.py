"""Write the OpenAPI document the app serves: ``python -m datahub.api.openapi > docs/openapi.json``.

``tests/api/test_openapi.py`` fails when the checked-in copy drifts from the code.
"""

from __future__ import annotations

import json
import sys

from datahub.api.app import create_app
from datahub.config import Config


def openapi_document() -> dict:
    return create_app(Config()).openapi()


def render() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
