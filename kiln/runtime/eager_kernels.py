"""Native kernels for eager operations on large arrays.

Eagerly, `bind` runs a primitive's NumPy impl: one pass per NumPy call, one thread, and the
impls of the transcendental and random primitives make many passes. For an elementwise
primitive on at least `threshold()` elements this module runs a compiled kernel instead: the
primitive's lowering rule (kiln/compiler/lower*.py) applied to flat 1-D operands, looped over
a range read at run time from a two-int64 bounds buffer (the chunked-kernel scheme of
native_segment.py), so one kernel per primitive, params and operand dtypes serves every shape,
and the range is cut into chunks that run on the thread pool. Smaller operations keep the
impl, whose dispatch is cheaper than any native call.

kiln.core cannot import the runtime, so `install()` (called by kiln.transforms.jit) registers
`run_eager` with kiln.core.trace.set_eager_kernel_hook.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import OrderedDict

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kiln.core import trace
from kiln.core.avals import ShapedArray
from kiln.runtime.native_call import data_address, thread_pool

__all__ = [
    "install",
    "uninstall",
    "threshold",
    "set_threshold",
    "eager_kernel_threshold",
    "supported",
    "stats",
    "clear",
]

#: Default element count from which an eager elementwise op runs natively (measured: below
#: ~64K elements the native call and its thread handoff cost more than NumPy's single pass).
DEFAULT_THRESHOLD = 1 << 16
#: Ranges of at least two chunks of this many elements are split over the thread pool;
#: smaller ones run whole on the calling thread (measured on 2 cores: waking the pool costs
#: more than it saves below about a million elements).
MIN_CHUNK = 1 << 20
#: A chunk boundary falls on a multiple of this many elements (whole cache lines).
CHUNK_ALIGN = 64
#: Compiled kernels kept (least recently used ones are dropped beyond that).
CACHE_LIMIT = 256
#: The extent the flat operands are declared with: loop bounds are clamped to it, and the
#: buffers are declared empty so that no access is assumed dereferenceable beyond the range.
_MAX_EXTENT = 1 << 48

#: The same for the ops NumPy does in one memory-bound pass (add, compare, ...), where a
#: native kernel only gains through threads.
DEFAULT_CHEAP_THRESHOLD = 1 << 24

_threshold = DEFAULT_THRESHOLD
_cheap_threshold = DEFAULT_CHEAP_THRESHOLD
_BROADCAST_IN_DIM = None
_CHEAP: frozenset = frozenset()
_kernels: OrderedDict = OrderedDict()
_lock = threading.Lock()
_UNSUPPORTED = object()
# How a kernel reads an operand: a flat array, a rank-0 operand (lax lets scalars broadcast),
# or one element standing for a whole array (a zero-stride broadcast view).
_DENSE, _RANK0, _BROADCAST = 0, 1, 2
_stats = {"native_calls": 0, "compiled": 0, "unsupported": 0}


def threshold() -> tuple[int, int]:
    """The element counts from which eager elementwise ops run natively: (most ops, the
    single-pass ones NumPy is already as fast at)."""
    return _threshold, _cheap_threshold


def set_threshold(count: int, cheap: int | None = None) -> None:
    """Run eager elementwise ops on at least `count` elements natively, and the single-pass
    ones (add, compare, ...) on at least `cheap` (default: `count` as well). Tests force
    both low to run every op record through the kernels."""
    global _threshold, _cheap_threshold
    _threshold = max(1, int(count))
    _cheap_threshold = _threshold if cheap is None else max(1, int(cheap))


@contextlib.contextmanager
def eager_kernel_threshold(count: int, cheap: int | None = None):
    """Temporarily change the thresholds (e.g. to 1, to run every eager op natively)."""
    previous = (_threshold, _cheap_threshold)
    set_threshold(count, cheap)
    try:
        yield
    finally:
        set_threshold(*previous)


def stats() -> dict:
    """Counters: native calls made, kernels compiled, signatures found unsupported."""
    return dict(_stats, cached=len(_kernels))


def clear() -> None:
    """Drop every compiled kernel."""
    with _lock:
        _kernels.clear()


# --- which primitives ------------------------------------------------------------------------


def _elementwise_primitives() -> frozenset:
    from kiln.compiler import lowering_elementwise as le
    from kiln.primitives import elementwise as ew
    from kiln.primitives import elementwise_math as em
    from kiln.primitives import random_bits as rb

    # digamma's native lowering gives -inf/inf at -0.0/0.0 where the impl gives NaN (the same
    # difference shows under jit); eagerly the impl's answer stands.
    return (frozenset(le._ONE_OP) - {em.digamma_p}) | {
        ew.not_p,
        ew.and_p,
        ew.or_p,
        ew.xor_p,
        em.square_p,
        ew.round_p,
        ew.integer_pow_p,
        em.pow_p,
        ew.select_n_p,
        ew.clamp_p,
        ew.convert_element_type_p,
        ew.bitcast_convert_type_p,
        rb.fma_p,
        rb.xla_log_p,
        rb.xla_log1p_p,
        rb.xla_erf_p,
        rb.xla_erf_inv_p,
        rb.threefry2x32_p,
    }


def supported() -> frozenset:
    """The primitives that may run natively when eager (for their lowerable dtypes)."""
    return _elementwise_primitives()


# --- building a kernel -----------------------------------------------------------------------


def _build(primitive, params: dict, in_types: tuple, out_dtypes: tuple):
    """The compiled entry for one signature: in_types are (dtype, _DENSE/_RANK0/_BROADCAST). Returns
    None where the primitive does not lower for these types."""
    from kiln.compiler import kir
    from kiln.runtime import engine

    if not all(np.dtype(d) in kir.SUPPORTED_DTYPES for d, _ in in_types):
        return None
    if not all(np.dtype(d) in kir.SUPPORTED_DTYPES for d in out_dtypes):
        return None
    # The verifier checks the kernel with its buffers as long as the loop may run; the
    # compiled one declares them empty, so LLVM assumes nothing dereferenceable past the range.
    checked = _program(primitive, params, in_types, out_dtypes, _MAX_EXTENT)
    if checked is None:
        return None
    kir.verify_program(checked)
    program = _program(primitive, params, in_types, out_dtypes, 0)
    return engine.compile_program(program, verify=False).entry


def _program(primitive, params: dict, in_types: tuple, out_dtypes: tuple, extent: int):
    """The kernel IR program of one signature, its flat buffers declared with `extent`
    elements; None where the primitive does not lower for these types."""
    from kiln.codegen.llvm import scalar_ops
    from kiln.compiler import kir, kir_rewrite, lower
    from kiln.compiler.lowering_random import threefry2x32_words
    from kiln.core.jaxpr import JaxprEqn, Var
    from kiln.primitives import random_bits as rb

    flat = (_MAX_EXTENT,)
    invars = [Var(ShapedArray(() if kind == _RANK0 else flat, d)) for d, kind in in_types]
    outvars = [Var(ShapedArray(flat, d)) for d in out_dtypes]
    inputs = [
        kir.Buffer(f"x{n}", d, (extent,) if kind == _DENSE else ())
        for n, (d, kind) in enumerate(in_types)
    ]
    outputs = [kir.Buffer(f"y{n}", d, (extent,), "output") for n, d in enumerate(out_dtypes)]
    loaded = dict(zip(invars, inputs))
    i = kir.Var("i0")
    eqn = JaxprEqn(primitive, invars, outvars, dict(params))
    builder = lower.ExprBuilder({v: eqn for v in outvars}, loaded)

    def read(var):
        buffer = loaded[var]
        return kir.Load(buffer, kir.as_index(0)) if buffer.shape == () else kir.Load(buffer, i)

    try:
        if primitive is rb.threefry2x32_p:
            values = list(threefry2x32_words(*[read(v) for v in invars]))
        elif primitive.multiple_results:
            return None
        else:
            values = [builder.lower(outvars[0], (i,))]
    except (lower.NotLowerable, kir.KirError, TypeError, ValueError, NotImplementedError):
        return None
    # A broadcast operand is an array to the rule and one element in memory.
    memo: dict = {}

    def one_element(node, children):
        if isinstance(node, kir.Load) and node.buffer.shape == ():
            return kir.Load(node.buffer, kir.as_index(0))
        return None

    values = [kir_rewrite.rewrite(v, one_element, memo) for v in values]
    for node in kir.toposort(values):
        if isinstance(node, kir.Op) and not scalar_ops.op_supported(node.op, node.args[-1].dtype):
            return None
    bounds = kir.Buffer("bounds", np.int64, (2,))
    start = kir.clamp(kir.Load(bounds, kir.as_index(0)), 0, _MAX_EXTENT)
    stop = kir.clamp(kir.Load(bounds, kir.as_index(1)), 0, _MAX_EXTENT)
    body = [kir.Store(out, i, value) for out, value in zip(outputs, values)]
    name = f"eager_{primitive.name}"
    kernel = kir.Kernel(name, [kir.Loop(i, start, stop, body)])
    return kir.Program(name, [bounds, *inputs, *outputs], [kernel])


def _kernel(primitive, params: dict, in_types: tuple, out_dtypes: tuple):
    try:
        key = (primitive, tuple(params.items()), in_types, out_dtypes)
        hash(key)
    except TypeError:
        return None
    entry = _kernels.get(key)
    if entry is not None:
        with _lock:
            if key in _kernels:
                _kernels.move_to_end(key)
        return None if entry is _UNSUPPORTED else entry
    entry = _build(primitive, params, in_types, out_dtypes)
    with _lock:
        if entry is None:
            _stats["unsupported"] += 1
            _kernels[key] = _UNSUPPORTED
        else:
            _stats["compiled"] += 1
            _kernels[key] = entry
        while len(_kernels) > CACHE_LIMIT:
            _kernels.popitem(last=False)
    return entry


# --- running one ---------------------------------------------------------------------------


def _chunk_edges(size: int, threads: int) -> list[int]:
    count = max(1, min(threads, size // MIN_CHUNK))
    edges = [0]
    for c in range(1, count):
        edge = -(-size * c // count // CHUNK_ALIGN) * CHUNK_ALIGN
        edges.append(min(max(edge, edges[-1]), size))
    edges.append(size)
    return sorted(set(edges))


def _run(entry, arrays: list, size: int) -> None:
    """Run entry over [0, size): on this thread, or in chunks on the pool."""
    if size < 2 * MIN_CHUNK:
        bounds = np.array((0, size), np.int64)
        table = np.array([data_address(bounds)] + [data_address(a) for a in arrays], np.int64)
        entry(data_address(table))
        return
    from kiln.runtime.native import num_threads

    threads = num_threads()
    edges = _chunk_edges(size, threads)
    chunks = len(edges) - 1
    bounds = np.empty((chunks, 2), np.int64)
    bounds[:, 0] = edges[:-1]
    bounds[:, 1] = edges[1:]
    table = np.empty((chunks, 1 + len(arrays)), np.int64)
    table[:, 0] = data_address(bounds) + np.arange(chunks, dtype=np.int64) * 16
    table[:, 1:] = [data_address(a) for a in arrays]
    base = data_address(table)
    if chunks == 1:
        entry(base)
    else:
        stride = table.strides[0]
        thread_pool(threads).run([(entry, base + c * stride) for c in range(chunks)])


def _operand(value: np.ndarray):
    """(array native code reads, how: _DENSE, _RANK0 or _BROADCAST): a broadcast of one
    value (every stride 0) is read as one element; other views are made dense."""
    if not value.ndim:
        return value, _RANK0
    if not any(value.strides):
        return as_strided(value, (), ()), _BROADCAST
    if value.flags.c_contiguous and value.flags.aligned:
        return value, _DENSE
    return np.ascontiguousarray(value), _DENSE


def _broadcast_scalar(value: np.ndarray, params: dict, out_aval):
    """broadcast_in_dim of one value: a read-only view with zero strides (arrays are never
    written, so nothing needs the copies), which the kernels above read as a scalar."""
    if value.ndim or out_aval.dtype != value.dtype:
        return None
    if math.prod(out_aval.shape) < _threshold:
        return None
    return np.broadcast_to(value, out_aval.shape)


def run_eager(primitive, values: list, params: dict, out_avals):
    """The hook: the outputs of an eager primitive computed natively, or None to leave it to
    the impl (small, unsupported, broadcasting or empty operands)."""
    if primitive is _BROADCAST_IN_DIM:
        return _broadcast_scalar(values[0], params, out_avals)
    shape = None
    for value in values:
        if value.ndim:
            if shape is None:
                shape = value.shape
                size = value.size
            elif value.shape != shape:
                return None
    if shape is None or size < (_cheap_threshold if primitive in _CHEAP else _threshold):
        return None
    outs = out_avals if primitive.multiple_results else (out_avals,)
    if any(o.shape != shape for o in outs):
        return None
    operands = [_operand(v) for v in values]
    in_types = tuple((a.dtype, kind) for a, kind in operands)
    out_dtypes = tuple(o.dtype for o in outs)
    entry = _kernel(primitive, params, in_types, out_dtypes)
    if entry is None:
        return None
    results = [np.empty(shape, d) for d in out_dtypes]
    _run(entry, [a for a, _ in operands] + results, size)
    _stats["native_calls"] += 1
    return results if primitive.multiple_results else results[0]


def install() -> None:
    """Run large eager elementwise ops through native kernels from now on."""
    global _BROADCAST_IN_DIM, _CHEAP
    from kiln.primitives import elementwise as ew
    from kiln.primitives import shape as sh

    _BROADCAST_IN_DIM = sh.broadcast_in_dim_p
    _CHEAP = frozenset(
        {ew.add_p, ew.add_any_p, ew.sub_p, ew.mul_p, ew.div_p, ew.neg_p, ew.abs_p}
        | {ew.eq_p, ew.ne_p, ew.lt_p, ew.le_p, ew.gt_p, ew.ge_p}
        | {ew.and_p, ew.or_p, ew.xor_p, ew.not_p}
    )
    trace.set_eager_kernel_hook(supported() | {_BROADCAST_IN_DIM}, run_eager)


def uninstall() -> None:
    """Back to the NumPy impls for every eager op."""
    trace.set_eager_kernel_hook(frozenset(), None)
