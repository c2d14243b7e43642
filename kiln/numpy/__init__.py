"""kiln.numpy: NumPy's API over immutable kiln arrays, built from kiln.lax."""

import numpy as _np

from kiln.core import dtypes as _dtypes
from kiln.numpy import array_methods as _array_methods  # noqa: F401 (installs operators)
from kiln.numpy.creation import *  # noqa: F401,F403
from kiln.numpy.ufuncs import *  # noqa: F401,F403
from kiln.numpy.ufuncs_float import *  # noqa: F401,F403
from kiln.numpy.manipulation import *  # noqa: F401,F403
from kiln.numpy.reductions import *  # noqa: F401,F403
from kiln.numpy.sorting import *  # noqa: F401,F403
from kiln.numpy.products import *  # noqa: F401,F403
from kiln.numpy.indexing import *  # noqa: F401,F403
from kiln.numpy import linalg  # noqa: F401
from kiln.numpy.vectorize import vectorize  # noqa: F401
from kiln.core.array import Array as ndarray  # noqa: F401

from kiln.numpy.scalar_types import *  # noqa: F401,F403 (dtype names, dtype queries)

pi, e, inf, nan, newaxis = _np.pi, _np.e, _np.inf, _np.nan, None
promote_types = _dtypes.promote_types
result_type = _dtypes.result_type
finfo = _dtypes.finfo
iinfo = _dtypes.iinfo
from kiln.numpy import fft  # noqa: F401,E402
from kiln.numpy.extras_aliases import *  # noqa: F401,F403,E402
from kiln.numpy.convolution import convolve, correlate  # noqa: F401,E402
from kiln.numpy.extras_sets import *  # noqa: F401,F403,E402
from kiln.numpy.extras_math import *  # noqa: F401,F403,E402
from kiln.numpy.extras_poly import *  # noqa: F401,F403,E402
from kiln.numpy.extras_more import *  # noqa: F401,F403,E402
