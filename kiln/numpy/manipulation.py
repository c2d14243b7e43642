"""Array manipulation for kiln.numpy: the functions that change shapes, join and split arrays,
rearrange elements and pick out diagonals and triangles. They live in family modules; this
module gathers them so `kiln.numpy` exports them all."""

from kiln.numpy.manipulation_shape import *  # noqa: F401,F403
from kiln.numpy.manipulation_join import *  # noqa: F401,F403
from kiln.numpy.manipulation_rearrange import *  # noqa: F401,F403
from kiln.numpy.manipulation_matrix import *  # noqa: F401,F403
from kiln.numpy import (
    manipulation_join as _join,
    manipulation_matrix as _matrix,
    manipulation_rearrange as _rearrange,
    manipulation_shape as _shape,
)

__all__ = [*_shape.__all__, *_join.__all__, *_rearrange.__all__, *_matrix.__all__]
