"""kiln.numpy: NumPy's API over immutable kiln arrays, built from kiln.lax."""
import numpy as _np

from kiln.core import dtypes as _dtypes
from kiln.numpy import array_methods as _array_methods  # noqa: F401 (installs operators)
from kiln.numpy.creation import *  # noqa: F401,F403
from kiln.numpy.ufuncs import *  # noqa: F401,F403
from kiln.numpy.manipulation import *  # noqa: F401,F403
from kiln.numpy.reductions import *  # noqa: F401,F403
from kiln.numpy.sorting import *  # noqa: F401,F403
from kiln.numpy.products import *  # noqa: F401,F403
from kiln.numpy.indexing import *  # noqa: F401,F403
from kiln.numpy import linalg  # noqa: F401
from kiln.runtime.array import Array as ndarray  # noqa: F401

bool_ = _np.bool_
int8, int16, int32, int64 = _np.int8, _np.int16, _np.int32, _np.int64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
float16, float32, float64 = _np.float16, _np.float32, _np.float64
complex64, complex128 = _np.complex64, _np.complex128
bfloat16 = _dtypes.bfloat16.type
pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None
promote_types = _dtypes.promote_types
result_type = _dtypes.result_type
finfo = _dtypes.finfo
iinfo = _dtypes.iinfo
