"""The differentiation API: jvp, linearize, vjp, grad, value_and_grad, the Jacobians and
linear_transpose, over pytrees of arrays.

Forward mode is the JVP trace (transforms/jvp.py); reverse mode is linearization (jvp with
unknown tangents under partial evaluation, transforms/partial_eval.py) followed by the
transposition of the linear jaxpr (transforms/transpose.py). Under `jit` both passes are staged
into the enclosing jaxpr, so the forward and backward computations compile as one program.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable, Sequence

import numpy as np

from kiln import api_util
from kiln.core import dtypes
from kiln.core.ad_util import float0, float0_zeros, has_tangent_space
from kiln.core.array import Array
from kiln.core.avals import get_aval
from kiln.core.trace import Tracer
from kiln.transforms.partial_eval import Linearized, linearize_flat
from kiln.transforms.staging import function_name, function_source


# --- argument handling ---------------------------------------------------------------------------


def _check_leaf(x: Any, where: str) -> Any:
    """An argument leaf as a kiln value: Python scalars become weakly typed arrays and NumPy
    values arrays, so rules always see arrays or tracers; float0 tangents pass as they are."""
    if isinstance(x, (Array, Tracer)):
        return x
    if isinstance(x, (np.ndarray, np.generic)) and x.dtype == float0:
        return x
    if isinstance(x, (bool, int, float, complex, np.ndarray, np.generic)):
        from kiln.core.trace import to_numpy_and_weak

        value, weak = to_numpy_and_weak(x)
        return Array._wrap(value, weak)
    raise TypeError(f"Argument '{x}' of type {type(x)} is not a valid JAX type.")


def _flatten_args(tree, where: str):
    leaves, treedef = api_util.flatten(tree)
    return [_check_leaf(x, where) for x in leaves], treedef


def _describe(fun: Callable) -> str:
    source = function_source(fun)
    return function_name(fun) + (f" at {source}" if source else "")


def _ones_like(x):
    from kiln.primitives.base import scalar_to_array
    from kiln.primitives.shape import broadcast_in_dim

    aval = get_aval(x)
    return broadcast_in_dim(scalar_to_array(1, aval.dtype, aval.weak_type), aval.shape, ())


def _zeros_cotangent(aval):
    """The cotangent of an input that received none: zeros, or float0 zeros for integers."""
    from kiln.primitives.base import zeros_like_aval

    if not has_tangent_space(aval.dtype):
        return float0_zeros(aval.shape)
    return zeros_like_aval(aval)


def _is_float0(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic)) and x.dtype == float0


# --- jvp and linearize ---------------------------------------------------------------------------


def jvp(fun: Callable, primals, tangents, has_aux: bool = False):
    """Evaluate `fun` at `primals` and its directional derivative along `tangents`: returns
    `(fun(*primals), tangent_out)` (and the aux data with `has_aux`)."""
    from kiln.transforms.jvp import jvp_flat

    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError(
            "primal and tangent arguments to kiln.jvp must be tuples or lists; "
            f"found {type(primals).__name__} and {type(tangents).__name__}."
        )
    flat_primals, in_tree = _flatten_args(tuple(primals), "jvp")
    flat_tangents, tangent_tree = _flatten_args(tuple(tangents), "jvp")
    if in_tree != tangent_tree:
        raise TypeError(
            "primal and tangent arguments to kiln.jvp must have the same tree "
            f"structure; primals have tree structure {in_tree} whereas tangents "
            f"have tree structure {tangent_tree}."
        )
    tangents_in = []
    for p, t in zip(flat_primals, flat_tangents):
        pa = get_aval(p)
        if _is_float0(t):
            if has_tangent_space(pa.dtype):
                raise TypeError(
                    "primal and tangent arguments to kiln.jvp do not match; dtypes "
                    "must be equal, or in case of int/bool primal dtype the tangent "
                    f"dtype must be float0.Got primal dtype {pa.dtype} and so "
                    f"expected tangent dtype {pa.dtype}, but got tangent dtype "
                    "float0 instead."
                )
            tangents_in.append(None)
            continue
        ta = get_aval(t)
        if tuple(ta.shape) != tuple(pa.shape):
            raise ValueError(
                "jvp called with different primal and tangent shapes;Got primal "
                f"shape {pa.shape} and tangent shape as {ta.shape}"
            )
        expected = pa.dtype if has_tangent_space(pa.dtype) else float0
        if ta.dtype != expected:
            raise TypeError(
                "primal and tangent arguments to kiln.jvp do not match; dtypes must "
                "be equal, or in case of int/bool primal dtype the tangent dtype "
                f"must be float0.Got primal dtype {pa.dtype} and so expected "
                f"tangent dtype {expected}, but got tangent dtype {ta.dtype} "
                "instead."
            )
        tangents_in.append(t if has_tangent_space(pa.dtype) else None)
    flat_fun, out_info = _flat_function(fun, in_tree, has_aux)
    out_primals, out_tangents = jvp_flat(flat_fun, flat_primals, tangents_in)
    out_tree, aux = out_info()
    out_tangents = [
        _zeros_cotangent(get_aval(p)) if t is None else t for p, t in zip(out_primals, out_tangents)
    ]
    result = (api_util.unflatten(out_tree, out_primals), api_util.unflatten(out_tree, out_tangents))
    return result + (aux,) if has_aux else result


def _flat_function(fun: Callable, in_tree, has_aux: bool, kwargs: dict | None = None):
    """`fun` as a function of flat leaves returning flat leaves; the second result reports the
    output tree and aux data once it has run."""
    box: dict = {}

    def flat_fun(*leaves):
        args = api_util.unflatten(in_tree, leaves)
        out = fun(*args, **(kwargs or {}))
        if has_aux:
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError(
                    "has_aux=True requires the function to return a pair "
                    f"(output, aux); {_describe(fun)} returned {type(out).__name__}"
                )
            out, box["aux"] = out
        out_leaves, box["tree"] = api_util.flatten(out)
        for leaf in out_leaves:
            if not isinstance(
                leaf, (Array, Tracer, np.ndarray, np.generic, bool, int, float, complex)
            ):
                raise TypeError(
                    f"{_describe(fun)} returned a value of type {type(leaf)}, "
                    "which is not a valid JAX type."
                )
        return out_leaves

    def out_info():
        aux = box.get("aux")
        if has_aux:
            aux = _strip_aux(aux)
        return box["tree"], aux

    return flat_fun, out_info


def _strip_aux(aux):
    """Aux data leaves come out as plain values of the enclosing computation (JAX semantics):
    the primal behind each tracer of the finished differentiation."""
    from kiln.transforms.jvp import JVPTracer

    def strip(leaf):
        while isinstance(leaf, JVPTracer) and not leaf._trace.alive:
            leaf = leaf.primal
        return leaf

    leaves, tree = api_util.flatten(aux)
    return api_util.unflatten(tree, [strip(leaf) for leaf in leaves])


def linearize(fun: Callable, *primals, has_aux: bool = False):
    """`(fun(*primals), f_jvp)` where `f_jvp(*tangents)` evaluates the linearization of `fun` at
    `primals` (computed once: the primal computation is not repeated)."""
    flat_primals, in_tree = _flatten_args(primals, "linearize")
    flat_fun, out_info = _flat_function(fun, in_tree, has_aux)
    out_primals, lin = linearize_flat(flat_fun, flat_primals)
    out_tree, aux = out_info()

    def f_jvp(*tangents):
        flat_t, t_tree = _flatten_args(tangents, "linearize")
        if t_tree != in_tree:
            raise TypeError(
                f"linearized function called on tangent values inconsistent with "
                f"the original primal values: expected {in_tree}, got {t_tree}"
            )
        for t, a in zip(flat_t, lin.in_avals):
            ta = get_aval(t) if not _is_float0(t) else None
            if ta is not None and tuple(ta.shape) != tuple(a.shape):
                raise ValueError(
                    f"linearized function called on tangent values inconsistent "
                    f"with the original primal values: got tangent shape "
                    f"{ta.shape} for primal shape {a.shape}"
                )
        outs = lin.apply([None if _is_float0(t) else t for t in flat_t])
        outs = [_zeros_cotangent(a) if o is None else o for o, a in zip(outs, lin.out_avals)]
        return api_util.unflatten(out_tree, outs)

    out = api_util.unflatten(out_tree, out_primals)
    return (out, f_jvp, aux) if has_aux else (out, f_jvp)


# --- vjp -----------------------------------------------------------------------------------------


class VJPFunction:
    """The pullback returned by `vjp`: call it with a cotangent shaped like the output."""

    def __init__(self, fun: Callable, lin: Linearized, in_tree, out_tree):
        self._fun_desc = _describe(fun)
        self._lin = lin
        self._in_tree = in_tree
        self._out_tree = out_tree

    def __call__(self, cotangent):
        lin = self._lin
        flat_ct, ct_tree = api_util.flatten(cotangent)
        if ct_tree != self._out_tree:
            raise ValueError(
                "unexpected tree structure.\n\nThe argument to a VJP function returned by "
                "`kiln.vjp` must match the pytree\nstructure of the differentiated function "
                f"{self._fun_desc}.\n\nBut the tree structures differ:\n  expected "
                f"{self._out_tree}\n  got {ct_tree}"
            )
        cts = []
        for ct, aval in zip(flat_ct, lin.out_avals):
            if _is_float0(ct):
                if has_tangent_space(aval.dtype) or tuple(np.shape(ct)) != tuple(aval.shape):
                    raise ValueError(
                        f"unexpected JAX type (e.g. shape/dtype) for argument to "
                        f"VJP function: got float0{list(np.shape(ct))}, but "
                        f"expected {aval.str_short()}"
                    )
                cts.append(None)
                continue
            ca = get_aval(ct)
            expected = aval.dtype if has_tangent_space(aval.dtype) else float0
            if tuple(ca.shape) != tuple(aval.shape) or (
                ca.dtype != expected and not (ca.weak_type and has_tangent_space(expected))
            ):
                exp = (
                    aval.str_short()
                    if expected != float0
                    else f"float0[{','.join(map(str, aval.shape))}]"
                )
                raise ValueError(
                    "unexpected JAX type (e.g. shape/dtype) for argument to VJP function: got "
                    f"{ca.str_short()}, but expected {exp} because the corresponding output "
                    f"of the differentiated function had JAX type {aval.str_short()}"
                )
            if not has_tangent_space(aval.dtype):
                cts.append(None)
                continue
            if ca.dtype != aval.dtype:
                from kiln.primitives.elementwise import convert_element_type

                ct = convert_element_type(ct, aval.dtype)
            cts.append(ct)
        cts_in = lin.transpose(cts)
        cts_in = [_zeros_cotangent(a) if c is None else c for c, a in zip(cts_in, lin.in_avals)]
        return api_util.unflatten(self._in_tree, cts_in)


def vjp(fun: Callable, *primals, has_aux: bool = False):
    """`(fun(*primals), vjp_fun)` (plus aux with `has_aux`), where `vjp_fun(ct)` returns a
    tuple with the cotangent of each primal argument."""
    flat_primals, in_tree = _flatten_args(primals, "vjp")
    flat_fun, out_info = _flat_function(fun, in_tree, has_aux)
    out_primals, lin = linearize_flat(flat_fun, flat_primals)
    out_tree, aux = out_info()
    out = api_util.unflatten(out_tree, out_primals)
    pullback = VJPFunction(fun, lin, in_tree, out_tree)
    return (out, pullback, aux) if has_aux else (out, pullback)


# --- grad ----------------------------------------------------------------------------------------


def _normalize_argnums(argnums) -> tuple[tuple[int, ...], bool]:
    if isinstance(argnums, (tuple, list)):
        return tuple(operator.index(a) for a in argnums), False
    return (operator.index(argnums),), True


def _split_diff_args(fun_desc: str, args: tuple, argnums: tuple[int, ...]):
    n = len(args)
    for a in argnums:
        if a >= n or a < -n:
            raise TypeError(
                f"differentiating with respect to argnums={a} requires at least "
                f"{(a if a >= 0 else -a - 1) + 1} positional arguments to be "
                f"passed by the caller, but got only {n} positional arguments."
            )
    return tuple(a % n for a in argnums)


def _with_arguments(fun: Callable, args: tuple, kwargs: dict, positions: tuple[int, ...]):
    """`fun` as a function of the arguments at `positions` only, the others fixed."""

    def partial_fun(*dyn_args):
        full = list(args)
        for i, value in zip(positions, dyn_args):
            full[i] = value
        return fun(*full, **kwargs)

    return partial_fun


def _check_input_dtype(x, holomorphic: bool, allow_int: bool, name: str) -> None:
    dtype = get_aval(x).dtype if not _is_float0(x) else float0
    if holomorphic:
        if not dtypes.is_complex(dtype):
            raise TypeError(
                f"{name} with holomorphic=True requires inputs with complex dtype, "
                f"but got {dtype.name}."
            )
        return
    if dtypes.is_floating(dtype) or dtypes.is_complex(dtype):
        return
    if allow_int and (dtypes.is_integer(dtype) or dtypes.is_bool(dtype) or dtype == float0):
        return
    raise TypeError(
        f"{name} requires real- or complex-valued inputs (input dtype that is a "
        f"sub-dtype of np.inexact), but got {dtype.name}. If you want to use "
        "Boolean- or integer-valued inputs, use vjp or set allow_int to True."
    )


def _check_output(out, holomorphic: bool, name: str) -> None:
    if not isinstance(out, (Array, Tracer, np.ndarray, np.generic, float, int, bool, complex)):
        raise TypeError(f"Gradient only defined for scalar-output functions. Output was {out!r}.")
    aval = get_aval(out)
    if aval.shape != ():
        raise TypeError(
            "Gradient only defined for scalar-output functions. Output had shape: "
            f"{tuple(aval.shape)}."
        )
    dtype = aval.dtype
    if holomorphic:
        if not dtypes.is_complex(dtype):
            raise TypeError(
                f"{name} with holomorphic=True requires outputs with complex dtype, "
                f"but got {dtype.name}."
            )
        return
    if dtypes.is_complex(dtype):
        raise TypeError(
            f"{name} requires real-valued outputs (output dtype that is a sub-dtype "
            f"of np.floating), but got {dtype.name}. For holomorphic "
            "differentiation, pass holomorphic=True. For differentiation of "
            "non-holomorphic functions involving complex outputs, use kiln.vjp "
            "directly."
        )
    if not dtypes.is_floating(dtype):
        raise TypeError(
            f"{name} requires real-valued outputs (output dtype that is a sub-dtype "
            f"of np.floating), but got {dtype.name}. For differentiation of "
            "functions with integer outputs, use kiln.vjp directly."
        )


def value_and_grad(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    reduce_axes=(),
):
    """A function returning `(fun(*args), gradient)` (with `has_aux`: `((value, aux),
    gradient)`); the gradient has the structure of the `argnums` arguments."""
    if not callable(fun):
        raise TypeError(f"Expected a callable value, got {fun!r}")
    nums, single = _normalize_argnums(argnums)
    name = "grad"

    @functools.wraps(fun)
    def value_and_grad_fun(*args, **kwargs):
        positions = _split_diff_args(_describe(fun), args, nums)
        dyn = tuple(args[i] for i in positions)
        flat_dyn, _ = _flatten_args(dyn, name)
        for leaf in flat_dyn:
            _check_input_dtype(leaf, holomorphic, allow_int, name)

        partial_fun = _with_arguments(fun, args, kwargs, positions)

        if has_aux:
            ans, pullback, aux = vjp(partial_fun, *dyn, has_aux=True)
        else:
            ans, pullback = vjp(partial_fun, *dyn)
        _check_output(ans, holomorphic, name)
        grads = pullback(_ones_like(ans))
        grads = grads[0] if single else tuple(grads)
        return ((ans, aux), grads) if has_aux else (ans, grads)

    return value_and_grad_fun


def grad(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
    reduce_axes=(),
):
    """The gradient of a scalar-valued `fun` with respect to the arguments `argnums`."""
    vg = value_and_grad(fun, argnums, has_aux, holomorphic, allow_int, reduce_axes)

    @functools.wraps(fun)
    def grad_fun(*args, **kwargs):
        if has_aux:
            (_, aux), g = vg(*args, **kwargs)
            return g, aux
        return vg(*args, **kwargs)[1]

    return grad_fun


# --- Jacobians -----------------------------------------------------------------------------------


def _std_basis(flat_avals):
    """Stacked one-hot tangents for every element of the flat inputs: returns, per input, an
    array of shape (total, *shape)."""
    from kiln.primitives.shape import reshape
    import kiln.numpy as jnp

    sizes = [int(np.prod(a.shape, dtype=np.int64)) for a in flat_avals]
    total = sum(sizes)
    dtype = dtypes.result_type(*(a.dtype for a in flat_avals)) if flat_avals else np.float32
    eye = jnp.eye(total, dtype=dtype)
    out, start = [], 0
    for a, size in zip(flat_avals, sizes):
        block = eye[:, start : start + size].astype(a.dtype)
        out.append(reshape(block, (total,) + tuple(a.shape), None))
        start += size
    return out, total


def _split_rows(x, in_avals, in_tree, leading_shape):
    """Unstack the basis axis (last after vmap's out_axes=-1) into the inputs' shapes."""
    from kiln.primitives.shape import reshape

    sizes = [int(np.prod(a.shape, dtype=np.int64)) for a in in_avals]
    parts, start = [], 0
    for a, size in zip(in_avals, sizes):
        part = x[..., start : start + size]
        parts.append(reshape(part, tuple(leading_shape) + tuple(a.shape), None))
        start += size
    return api_util.unflatten(in_tree, parts)


def jacfwd(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
):
    """The Jacobian of `fun` by forward mode (one jvp per input element, vmapped)."""
    from kiln.transforms.vmap import vmap

    nums, single = _normalize_argnums(argnums)

    def jacfun(*args, **kwargs):
        positions = _split_diff_args(_describe(fun), args, nums)
        dyn = tuple(args[i] for i in positions)
        flat_dyn, dyn_tree = _flatten_args(dyn, "jacfwd")
        for leaf in flat_dyn:
            _check_jac_input(leaf, holomorphic, "jacfwd")

        partial_fun = _with_arguments(fun, args, kwargs, positions)

        in_avals = [get_aval(x) for x in flat_dyn]
        basis, total = _std_basis(in_avals)

        def push(*tangent_leaves):
            tangents = api_util.unflatten(dyn_tree, list(tangent_leaves))
            res = jvp(partial_fun, dyn, tangents, has_aux=has_aux)
            return (res[1], res[2]) if has_aux else res[1]

        if has_aux:
            jac, aux = vmap(push, out_axes=(-1, None))(*basis)
        else:
            jac = vmap(push, out_axes=-1)(*basis)
        out_leaves, out_tree = api_util.flatten(jac)
        per_arg = [_split_arg_tree(leaf, in_avals, dyn_tree, single) for leaf in out_leaves]
        result = api_util.unflatten(out_tree, per_arg)
        return (result, aux) if has_aux else result

    return jacfun


def _split_arg_tree(leaf, in_avals, dyn_tree, single):
    leading = tuple(get_aval(leaf).shape[:-1])
    tree = _split_rows(leaf, in_avals, dyn_tree, leading)
    return tree[0] if single else tree


def _check_jac_input(x, holomorphic: bool, name: str) -> None:
    dtype = get_aval(x).dtype
    if holomorphic:
        if not dtypes.is_complex(dtype):
            raise TypeError(
                f"{name} with holomorphic=True requires inputs with complex dtype, "
                f"but got {dtype.name}."
            )
    elif not dtypes.is_floating(dtype):
        raise TypeError(
            f"{name} requires real-valued inputs (input dtype that is a sub-dtype "
            f"of np.floating), but got {dtype.name}. For holomorphic "
            "differentiation, pass holomorphic=True. For differentiation of "
            "non-holomorphic functions involving complex inputs or integer inputs, "
            "use kiln.vjp directly."
        )


def jacrev(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
):
    """The Jacobian of `fun` by reverse mode (one vjp per output element, vmapped)."""
    from kiln.transforms.vmap import vmap

    nums, single = _normalize_argnums(argnums)

    def jacfun(*args, **kwargs):
        positions = _split_diff_args(_describe(fun), args, nums)
        dyn = tuple(args[i] for i in positions)
        flat_dyn, dyn_tree = _flatten_args(dyn, "jacrev")
        for leaf in flat_dyn:
            if not allow_int:
                _check_jac_input(leaf, holomorphic, "jacrev")

        partial_fun = _with_arguments(fun, args, kwargs, positions)

        if has_aux:
            y, pullback, aux = vjp(partial_fun, *dyn, has_aux=True)
        else:
            y, pullback = vjp(partial_fun, *dyn)
        y_leaves, y_tree = api_util.flatten(y)
        y_avals = [get_aval(v) for v in y_leaves]
        basis, total = _std_basis(y_avals)
        cts = vmap(lambda *b: pullback(api_util.unflatten(y_tree, list(b))))(*basis)
        # cts: a tuple (one per dyn arg) of trees with leading axis `total`
        from kiln.primitives.shape import reshape

        ct_leaves, ct_tree = api_util.flatten(cts)
        per_out = []
        sizes = [int(np.prod(a.shape, dtype=np.int64)) for a in y_avals]
        for a, size, start in zip(y_avals, sizes, np.cumsum([0] + sizes[:-1])):
            rows = [
                reshape(
                    c[int(start) : int(start) + size], tuple(a.shape) + tuple(c.shape[1:]), None
                )
                for c in ct_leaves
            ]
            tree = api_util.unflatten(ct_tree, rows)
            per_out.append(tree[0] if single else tree)
        result = api_util.unflatten(y_tree, per_out)
        return (result, aux) if has_aux else result

    return jacfun


jacobian = jacrev


def hessian(
    fun: Callable,
    argnums: int | Sequence[int] = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
):
    """The Hessian of a scalar function: jacfwd of jacrev."""
    return jacfwd(
        jacrev(fun, argnums, has_aux=has_aux, holomorphic=holomorphic),
        argnums,
        has_aux=has_aux,
        holomorphic=holomorphic,
    )


# --- linear_transpose ----------------------------------------------------------------------------


def linear_transpose(fun: Callable, *primals, reduce_axes=()):
    """The transpose of the linear function `fun`, traced at the shapes and dtypes of
    `primals`: `f_t(ct)` returns a tuple with one cotangent per primal argument."""
    from kiln.transforms.transpose import linear_transpose_flat

    flat_primals, in_tree = _flatten_args(primals, "linear_transpose")
    in_avals = [get_aval(p) for p in flat_primals]
    for a in in_avals:
        if not dtypes.is_inexact(a.dtype):
            raise TypeError(
                "linear_transpose only supports [float or complex] -> [float or "
                f"complex], got {a.dtype.name} input"
            )
    flat_fun, out_info = _flat_function(fun, in_tree, False)
    from kiln.transforms.staging import trace_to_jaxpr

    closed, _ = trace_to_jaxpr(lambda *xs: (flat_fun(*xs), None), in_avals)
    out_tree, _ = out_info()
    out_avals = closed.jaxpr.out_avals

    def transposed(cotangent):
        from kiln.core.ad_util import UndefinedPrimal
        from kiln.transforms.transpose import backward_pass

        flat_ct, ct_tree = api_util.flatten(cotangent)
        if ct_tree != out_tree:
            raise TypeError(
                f"cotangent tree does not match function output, expected "
                f"{out_tree} but got {ct_tree}"
            )
        for ct, a in zip(flat_ct, out_avals):
            ca = get_aval(ct)
            if tuple(ca.shape) != tuple(a.shape) or ca.dtype != a.dtype and not ca.weak_type:
                raise TypeError(
                    f"cotangent type does not match function output, expected "
                    f"{a.str_short()} but got {ca.str_short()}"
                )
        cts = backward_pass(
            closed.jaxpr, closed.consts, [UndefinedPrimal(a) for a in in_avals], flat_ct
        )
        cts = [_zeros_cotangent(a) if c is None else c for c, a in zip(cts, in_avals)]
        return api_util.unflatten(in_tree, cts)

    del linear_transpose_flat
    return transposed
