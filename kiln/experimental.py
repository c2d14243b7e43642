"""kiln.experimental: APIs whose shape may still change."""

from kiln.callbacks import io_callback  # noqa: F401

__all__ = ["io_callback"]
