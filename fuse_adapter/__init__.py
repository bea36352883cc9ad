"""FUSE file systems (pyfuse3): read-only dataset-version views and writable write-back workspaces."""
