"""A command module whose third-party dependency is not installed (as the web stack is not in
the CSI image): tests/images/test_version.py checks `datahub --version` still answers."""

import datahub_test_dependency_that_is_not_installed  # noqa: F401
