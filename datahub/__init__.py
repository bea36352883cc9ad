"""datahub: a tiered data cache and versioned dataset catalog for deep-learning training."""

__version__ = "0.1.0"
