"""kiln.numpy.linalg (being written)."""
__all__ = []
