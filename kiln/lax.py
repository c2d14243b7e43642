"""kiln.lax: the low-level operations, one per primitive (strict dtypes, explicit shapes)."""

from kiln.primitives.elementwise import *  # noqa: F401,F403
from kiln.primitives.shape import *  # noqa: F401,F403
from kiln.primitives.shape_slice import *  # noqa: F401,F403
from kiln.primitives.reductions import *  # noqa: F401,F403
from kiln.primitives.sorting import *  # noqa: F401,F403
from kiln.primitives.linalg import *  # noqa: F401,F403
from kiln.primitives.indexing import *  # noqa: F401,F403
from kiln.primitives.indexing_gather import *  # noqa: F401,F403
from kiln.primitives.indexing_scatter import *  # noqa: F401,F403
from kiln.primitives.elementwise_math import *  # noqa: F401,F403
from kiln.primitives.custom_derivatives import stop_gradient  # noqa: F401
from kiln.primitives.control_flow import *  # noqa: F401,F403
from kiln.primitives.collectives import *  # noqa: F401,F403,E402
from kiln.primitives.conv import *  # noqa: F401,F403,E402
from kiln import lax_linalg as linalg  # noqa: E402,F401
from kiln.primitives.windowed import *  # noqa: F401,F403,E402
from kiln.primitives.fft import FftType, fft, fft_p  # noqa: F401,E402
from kiln.primitives.special import *  # noqa: F401,F403,E402
from kiln.lax_precision import Precision  # noqa: F401,E402
