"""Import: turn an object-store prefix, a local directory or a JSON-lines manifest into a version.

``import_source`` is the one entry point (the CLI and the demo call it). See docs/cli.md
("datahub import") for the source formats, the key rules and what a re-import commits.
"""

from datahub.ingest.importer import ImportReport, import_source

__all__ = ["ImportReport", "import_source"]
