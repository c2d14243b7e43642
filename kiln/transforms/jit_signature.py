"""The argument signatures of kiln.jit: each leaf's (shape, dtype, weak_type) key on the call
path, argument flattening, the structure part of an entry key, conversion of scalar and NumPy
arguments to Arrays, and the short forms used in messages. Used by jit.py and jit_compiled.py."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import optree

from kiln import api_util
from kiln.config import config as _config
from kiln.core import debug_checks, dtypes
from kiln.core.array import Array
from kiln.core.avals import ShapedArray
from kiln.core.trace import Tracer

_NAMESPACE = api_util.NAMESPACE
_tree_flatten = optree.tree_flatten


# --- argument signatures -----------------------------------------------------------------------

_SCALAR_SIGNATURES = {
    x64: {
        bool: ((), dtypes.bool_, False),
        int: ((), dtypes.int64 if x64 else dtypes.int32, True),
        float: ((), dtypes.float64 if x64 else dtypes.float32, True),
        complex: ((), dtypes.complex128 if x64 else dtypes.complex64, True),
    }
    for x64 in (False, True)
}

_VALID_LEAF = (Array, Tracer, np.ndarray, np.generic, bool, int, float, complex)


def _leaf_signature(x: Any) -> tuple:
    """(shape, dtype, weak_type) of a top-level argument leaf; anything that is not an array or
    scalar gets a key no entry can have (the trace then raises the proper error)."""
    if type(x) is Array:
        v = x._value
        return (v.shape, v.dtype, x.weak_type)
    sig = _flat_signature(x)
    if sig is None:
        sig = (x.shape, x.dtype, False) if isinstance(x, np.ndarray) else (type(x),)
    return sig


# optree's C entry point skips a Python-level wrapper (a measurable part of a ~2 µs call).
_c_flatten = getattr(getattr(optree, "_C", None), "flatten", None)


def _flatten_args(args: tuple, kwargs: dict):
    """Flatten call arguments; without keyword arguments just the tuple (it is faster)."""
    tree = (args, kwargs) if kwargs else args
    if _c_flatten is not None:
        return _c_flatten(tree, None, False, _NAMESPACE)
    return _tree_flatten(tree, namespace=_NAMESPACE)


def _tree_key(treedef, nargs: int, has_kwargs: bool):
    """The structure part of a cache key: the argument count when the arguments are a flat
    tuple of leaves (so the hot path need not flatten), else the treedef."""
    if not has_kwargs and treedef.num_leaves == nargs and treedef.num_nodes == nargs + 1:
        return nargs
    return treedef


def _flat_signature(x):
    """The signature of a scalar or NumPy argument, or None for anything that may be a pytree
    node (those go through flattening)."""
    sig = _SCALAR_SIGNATURES[_config.enable_x64].get(type(x))
    if sig is not None:
        return sig
    if type(x) is np.ndarray or isinstance(x, np.generic):
        return (x.shape, x.dtype, False)
    return None


def _aval_signature(aval: ShapedArray) -> tuple:
    return (aval.shape, aval.dtype, aval.weak_type)


def _to_array(x: Any, aval: ShapedArray) -> Array:
    """A scalar or NumPy argument as a kiln Array of the executable's input type (a copy: the
    caller may write its NumPy array later)."""
    if type(x) is int:
        dtypes.python_int_dtype(x)  # OverflowError naming the value, as on the first call
    return Array._wrap(np.array(x, dtype=aval.dtype), aval.weak_type)


#: NumPy arguments of at least this many bytes are read in place rather than copied (below it
#: a copy costs less than the view and the check of the outputs that reading in place needs).
BORROW_BYTES = 1 << 16


def _convert_leaves(leaves: list, in_avals: Sequence[ShapedArray]) -> tuple[list, list]:
    """(the leaves as Arrays, the NumPy buffers borrowed). Scalars and small or mistyped NumPy
    arrays are copied; a large C-contiguous NumPy array of the input's dtype is borrowed: the
    call reads it in place (calls are synchronous, and compiled code never writes its inputs)
    through a read-only view, which no output may take as a donated buffer. The caller passes
    the outputs through `_unshared` so that none of them keeps a view of a borrowed buffer."""
    converted = []
    borrowed = []
    for x, aval in zip(leaves, in_avals):
        if type(x) is Array:
            converted.append(x)
        elif (
            type(x) is np.ndarray
            and x.nbytes >= BORROW_BYTES
            and x.dtype == aval.dtype
            and x.flags.c_contiguous
        ):
            view = x.view()
            view.flags.writeable = False
            borrowed.append(view)
            converted.append(Array._wrap(view, aval.weak_type))
        else:
            converted.append(_to_array(x, aval))
    return converted, borrowed


def _unshared(outs: list, borrowed: list) -> list:
    """The outputs of a call that borrowed NumPy buffers, each one that may share memory with
    a borrowed buffer (the argument returned as is, a view an interpreted reshape made) copied:
    the caller may write its array after the call, and Arrays are immutable."""
    for n, out in enumerate(outs):
        if type(out) is Array and any(np.may_share_memory(out._value, b) for b in borrowed):
            outs[n] = Array._wrap(np.array(out._value), out.weak_type)
    return outs


def execute_leaves(entry, leaves: list, name: str) -> list:
    """The outputs of entry's executable run on a call's flat leaves: scalars and NumPy
    arrays converted (large ones borrowed, see _convert_leaves), and checked for NaN/inf
    while debug_nans/debug_infs are on (debug_checks.execute_checked)."""
    args, borrowed = _convert_leaves(leaves, entry.in_avals)
    if _config.check_special:
        outs = debug_checks.execute_checked(name, entry, args)
    else:
        outs = entry.execute(args)
    return _unshared(outs, borrowed) if borrowed else outs


def _short(aval: ShapedArray) -> str:
    return aval.str_short() + (" weak" if aval.weak_type else "")


def _format_signature(names: list[str], avals, static_names) -> str:
    parts = [f"{n}: {_short(a)}" for n, a in zip(names, avals)]
    parts += [f"{n}={v!r} (static)" for n, v in static_names]
    return f"({', '.join(parts)})"


def _signature_str(sig: tuple) -> str:
    if len(sig) != 3:
        return sig[0].__name__
    shape, dtype, weak = sig
    return _short(ShapedArray(shape, dtypes.canonicalize(dtype), weak))


def _canonical(sig: tuple) -> tuple:
    if len(sig) != 3:
        return sig
    shape, dtype, weak = sig
    return (shape, dtypes.canonicalize(dtype), weak)
