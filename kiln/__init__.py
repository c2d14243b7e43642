"""kiln: composable transformations of numerical Python programs, compiled to native code."""

from kiln.config import config, debug_infs, debug_nans
from kiln.api import ShapeDtypeStruct, clear_caches, make_jaxpr
from kiln.core.array import Array

from kiln import lax, numpy, nn, tree_util  # noqa: E402  (the public namespaces)

__version__ = "0.1.0"

# jit, callbacks and host/device helpers
from kiln.transforms.jit import jit  # noqa: E402
from kiln import debug  # noqa: E402
from kiln.callbacks import pure_callback, effects_barrier  # noqa: E402
from kiln.runtime.executable import (
    block_until_ready,
    default_backend,
    device_put,  # noqa: E402
    devices,
)
from kiln.runtime.cache import cache_stats as jit_cache_stats  # noqa: E402
from kiln import random  # noqa: E402

# differentiation and batching
from kiln.transforms.ad import (
    grad,
    hessian,
    jacfwd,
    jacobian,
    jacrev,
    jvp,  # noqa: E402
    linear_transpose,
    linearize,
    value_and_grad,
    vjp,
)
from kiln.transforms.vmap import vmap  # noqa: E402
from kiln import custom_derivatives  # noqa: E402
from kiln.custom_derivatives import custom_jvp, custom_vjp, closure_convert  # noqa: E402
from kiln import test_util  # noqa: E402

# gradient checkpointing
from kiln import ad_checkpoint  # noqa: E402
from kiln.ad_checkpoint import checkpoint, checkpoint_policies, remat  # noqa: E402
from kiln import scipy  # noqa: E402

# pytrees, shapes, context managers and host helpers
from kiln import dlpack, dtypes, errors, tree  # noqa: E402
from kiln.api import (  # noqa: E402
    default_device,
    device_get,
    disable_jit,
    ensure_compile_time_eval,
    eval_shape,
    named_scope,
    print_environment_info,
)

# The compiler of the configured backend, loaded with the package (kiln.compiler.pipeline.preload)
from kiln.compiler import pipeline as _pipeline  # noqa: E402

_pipeline.preload()
del _pipeline
