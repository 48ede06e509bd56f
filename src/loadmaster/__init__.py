"""loadmaster: a multi-tenant GPU cluster scheduler for deep-learning training."""

__version__ = "0.1.0"
