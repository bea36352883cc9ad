"""LabelX: labeling service and web UI whose accepted labels become new dataset versions."""
