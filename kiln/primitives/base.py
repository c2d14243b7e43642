"""Constructors for the routine parts of primitives: elementwise ops, the shape/dtype checks
they share and the common shapes of a derivative rule (defjvp, deflinear), so that a primitive
definition reads as a declaration."""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive

# dtype families a primitive may accept (the values of dtypes.dtype_family, plus INT for both
# signed and unsigned integers)
BOOL = "bool"
INT = "int"  # signed and unsigned integers
UINT = "uint"
SINT = "sint"
FLOAT = "float"  # bfloat16, float16, float32, float64
COMPLEX = "complex"
INEXACT = (FLOAT, COMPLEX)
NUMBER = (INT, FLOAT, COMPLEX)
ANY = (BOOL, INT, FLOAT, COMPLEX)
INTEGRAL = (BOOL, INT)  # bitwise ops


def check_dtype(name: str, dtype: np.dtype, allowed: Iterable[str]) -> None:
    allowed = (allowed,) if isinstance(allowed, str) else tuple(allowed)
    family = dtypes.dtype_family(dtype)
    if family in allowed or INT in allowed and family in (SINT, UINT):
        return
    raise TypeError(
        f"{name} does not accept dtype {dtype.name}; it accepts {', '.join(allowed)} arrays."
    )


def broadcast_scalar_shapes(name: str, *avals: ShapedArray) -> tuple:
    """lax elementwise ops need equal shapes; rank-0 operands broadcast against the rest."""
    shapes = {a.shape for a in avals if a.shape != ()}
    if len(shapes) > 1:
        raise TypeError(
            f"{name} got incompatible shapes for broadcasting: "
            f"{', '.join(str(a.shape) for a in avals)}. lax-level ops need equal "
            "shapes; use kiln.numpy functions for NumPy broadcasting."
        )
    return shapes.pop() if shapes else ()


def check_same_dtypes(name: str, *avals: ShapedArray) -> None:
    first = avals[0].dtype
    if any(a.dtype != first for a in avals[1:]):
        raise TypeError(
            f"{name} requires arguments to have the same dtypes, got "
            f"{', '.join(a.dtype.name for a in avals)}. (Convert with "
            "lax.convert_element_type, or use kiln.numpy, which promotes.)"
        )


def standard_binop(
    name: str, impl: Callable, allowed, result_dtype: Callable | None = None, nargs: int = 2
) -> Primitive:
    """An elementwise op of `nargs` same-dtype operands (rank-0 operands broadcast). The result
    dtype is `result_dtype(dtype)` (default: the operands'); it is weak iff all operands are."""
    prim = Primitive(name)

    def abstract_eval(*avals: ShapedArray, **params) -> ShapedArray:
        if len(avals) != nargs:
            raise TypeError(
                f"{name} takes {nargs} operand{'s' if nargs > 1 else ''}, got {len(avals)}"
            )
        check_same_dtypes(name, *avals)
        check_dtype(name, avals[0].dtype, allowed)
        shape = broadcast_scalar_shapes(name, *avals)
        dtype = result_dtype(avals[0].dtype) if result_dtype else avals[0].dtype
        return ShapedArray(shape, dtype, all(a.weak_type for a in avals))

    prim.def_impl(impl)
    prim.def_abstract_eval(abstract_eval)
    return prim


def standard_unop(
    name: str, impl: Callable, allowed, result_dtype: Callable | None = None
) -> Primitive:
    """An elementwise op of one operand (see standard_binop)."""
    return standard_binop(name, impl, allowed, result_dtype, nargs=1)


def to_bool(dtype: np.dtype) -> np.dtype:
    return dtypes.bool_


def real_dtype(dtype: np.dtype) -> np.dtype:
    return (
        np.dtype(np.float64)
        if dtype == np.complex128
        else (np.dtype(np.float32) if dtype == np.complex64 else dtype)
    )


def ignore_fp_errors(fn: Callable) -> Callable:
    """Run a NumPy impl without floating-point warnings: kiln, like XLA, returns inf/nan
    silently."""

    def wrapped(*args, **params):
        with np.errstate(all="ignore"):
            return fn(*args, **params)

    wrapped.__name__ = getattr(fn, "__name__", "impl")
    return wrapped


def scipy_special(name: str) -> Callable:
    """scipy.special.<name> as a function that imports scipy.special when first called: the
    import takes ~170 ms (numpy.testing and numpy.f2py come with it), most of what
    `import kiln` took, and only the reference impls of special functions need it."""

    def call(*args, **kwargs):
        import scipy.special

        return getattr(scipy.special, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def scalar_to_array(value, dtype: np.dtype, weak: bool = True):
    """A Python scalar as a (weakly typed) kiln constant of `dtype`, converted on the host."""
    return Array._wrap(np.asarray(value, dtype=dtype), weak)


def lax_operands(*args):
    """lax ops accept Python scalars next to arrays: give them the arrays' dtype, weakly typed."""
    if all(not isinstance(a, (bool, int, float, complex)) for a in args):
        return args
    ref = next((a for a in args if not isinstance(a, (bool, int, float, complex))), None)
    if ref is None:
        dtype, _ = dtypes.result_type_with_weak(*(dtypes.dtype_and_weak_of(a) for a in args))
    else:
        dtype = ref.dtype if hasattr(ref, "dtype") else dtypes.canonicalize(np.asarray(ref).dtype)
    return tuple(
        scalar_to_array(a, dtype) if isinstance(a, (bool, int, float, complex)) else a for a in args
    )


# --- derivative rules --------------------------------------------------------------------------
# The common shapes of a jvp or transpose rule, as declarations (JAX's defjvp and deflinear), so
# that most primitives state their derivative in one line. A tangent or cotangent of None is a
# symbolic zero. The lax ops these rules build on are imported where a rule runs: the
# elementwise, shape and reduction modules are themselves built with this one.


def defjvp(prim: Primitive, *jvp_fns: Callable | None) -> Callable:
    """Declare the jvp of an elementwise op: `jvp_fns[i](g, *primals, **params)` is the output
    tangent that operand i's tangent `g` contributes (g * f'(x) for f(x)); None for an operand
    the op is not differentiable in. Contributions of rank-0 operands are broadcast to the
    output's shape, and the contributions are added."""

    def jvp_rule(primals, tangents, **params):
        from kiln.primitives.elementwise import add

        out = prim.bind(*primals, **params)
        out_tangent = None
        for jvp_fn, tangent in zip(jvp_fns, tangents):
            if jvp_fn is None or tangent is None:
                continue
            term = broadcast_to_shape(jvp_fn(tangent, *primals, **params), out.shape)
            out_tangent = term if out_tangent is None else add(out_tangent, term)
        return out, out_tangent

    return prim.def_jvp(jvp_rule)


def deflinear(prim: Primitive, transpose_fn: Callable) -> Callable:
    """Declare a linear op: its jvp applies the op to the tangents (zeros standing in for the
    symbolic ones), and `transpose_fn(cotangent, *args, **params) -> list` is its transpose."""

    def jvp_rule(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        if all(t is None for t in tangents):
            return out, None
        tangents = [zeros_like(p) if t is None else t for p, t in zip(primals, tangents)]
        return out, prim.bind(*tangents, **params)

    prim.def_jvp(jvp_rule)
    prim.def_transpose(transpose_fn)
    return jvp_rule


def defjvp_zero(prim: Primitive) -> Callable:
    """Declare an op whose output has a zero derivative everywhere it has one (an integer or
    bool result, or a piecewise-constant function such as floor or sign)."""

    def jvp_rule(primals, tangents, **params):
        out = prim.bind(*primals, **params)
        return (out, [None] * len(out)) if prim.multiple_results else (out, None)

    return prim.def_jvp(jvp_rule)


def def_non_differentiable(prim: Primitive, reason: str) -> Callable:
    """Declare an op that cannot be differentiated: differentiating through it with a non-zero
    tangent raises a TypeError that gives `reason` (and the way out, if any)."""
    prim.non_differentiable_reason = reason

    def jvp_rule(primals, tangents, **params):
        raise TypeError(f"Differentiation rule for '{prim.name}' not implemented: {reason}")

    return prim.def_jvp(jvp_rule)


def zeros_like(x):
    """Zeros of x's shape, dtype and weak type."""
    from kiln.core.avals import get_aval

    return zeros_like_aval(get_aval(x))


def zeros_like_aval(aval):
    """Zeros of an abstract value's shape, dtype and weak type."""
    from kiln.primitives.shape import broadcast_in_dim

    return broadcast_in_dim(scalar_to_array(0, aval.dtype, aval.weak_type), tuple(aval.shape), ())


def broadcast_to_shape(x, shape: tuple):
    """x, broadcast to `shape` if it is rank-0 (lax elementwise ops broadcast only those)."""
    from kiln.primitives.shape import broadcast_in_dim

    return x if tuple(x.shape) == tuple(shape) else broadcast_in_dim(x, shape, ())


def unbroadcast(cotangent, shape: tuple):
    """The cotangent of an operand of `shape` that an elementwise op broadcast: summed over
    every axis when the operand was rank-0 and the result was not."""
    from kiln.primitives.reductions import reduce_sum

    if tuple(cotangent.shape) == tuple(shape):
        return cotangent
    return reduce_sum(cotangent, tuple(range(len(cotangent.shape))))


def instantiate(tangent, primal):
    """A tangent with symbolic zeros made concrete: zeros shaped like `primal` for None."""
    return zeros_like(primal) if tangent is None else tangent


# --- batching rules ----------------------------------------------------------------------------
# A batching rule sees each operand with its batch dimension (an int, or None for an operand
# that is the same for every batch element) and returns the result(s) with theirs. Rules run
# with the enclosing trace current, so the lax ops they call batch nothing themselves.


def move_bdim(x, src: int | None, dst: int):
    """x with its batch dimension `src` moved to position `dst` (x unchanged if it is there)."""
    from kiln.primitives.shape import transpose

    if src is None or src == dst:
        return x
    perm = [d for d in range(len(x.shape)) if d != src]
    perm.insert(dst, src)
    return transpose(x, tuple(perm))


def bdim_at_front(x, bdim: int | None, size: int):
    """x with its batch dimension first; an unbatched x is broadcast to `size` copies."""
    from kiln.primitives.shape import broadcast_in_dim

    if bdim is None:
        shape = tuple(x.shape)
        return broadcast_in_dim(x, (size,) + shape, tuple(range(1, len(shape) + 1)))
    return move_bdim(x, bdim, 0)


def batch_size(args, dims) -> int:
    """The size of the batch dimension of the batched operands."""
    for x, d in zip(args, dims):
        if d is not None:
            return x.shape[d]
    raise ValueError("batch_size: no operand is batched")


def broadcast_batched_operands(args, dims):
    """Operands of a lax elementwise op (equal shapes, rank-0 broadcasting) with every batched
    operand's batch dimension first and every operand shaped like the batched result, except
    unbatched rank-0 operands, which broadcast as they are. Returns the new operands."""
    from kiln.primitives.shape import broadcast_in_dim

    size = batch_size(args, dims)
    moved = [move_bdim(x, d, 0) for x, d in zip(args, dims)]
    # the per-example shape: that of any operand of non-zero per-example rank
    example_shape = ()
    for x, d in zip(moved, dims):
        rank = len(x.shape) - (d is not None)
        if rank:
            example_shape = tuple(x.shape[1:]) if d is not None else tuple(x.shape)
            break
    out_shape = (size,) + example_shape
    result = []
    for x, d in zip(moved, dims):
        if d is None:
            if len(x.shape) == 0:
                result.append(x)
            else:
                result.append(broadcast_in_dim(x, out_shape, tuple(range(1, len(out_shape)))))
        elif tuple(x.shape) != out_shape:  # a batched per-example scalar among larger operands
            result.append(broadcast_in_dim(x, out_shape, (0,)))
        else:
            result.append(x)
    return result


def elementwise_batching(prim: Primitive) -> Callable:
    """Declare the batching rule of an elementwise op (any number of operands, any mix of
    batched and unbatched ones): the op runs once on operands broadcast to the batched shape,
    with the batch dimension first."""

    def batching_rule(args, dims, **params):
        operands = broadcast_batched_operands(args, dims)
        out = prim.bind(*operands, **params)
        if prim.multiple_results:
            return out, [0] * len(out)
        return out, 0

    return prim.def_batching(batching_rule)
