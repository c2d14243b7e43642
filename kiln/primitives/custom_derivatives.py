"""The primitives behind custom derivative rules (kiln.custom_jvp, kiln.custom_vjp).

* `custom_jvp_call`: calls `call_jaxpr` (the primal function, its closed-over values passed as
  the first `num_consts` operands); its jvp rule runs the user's jvp function instead of
  differentiating the body. Eagerly and once compiled it is just the call.
* `custom_vjp_call`: likewise for a function with a custom reverse rule. Its jvp rule runs the
  user's forward function (the primal outputs and residuals) and emits `custom_lin` on the
  tangents: a linear map whose transpose is the user's backward function. `custom_lin` cannot be
  evaluated forwards, which is why forward mode of a custom_vjp function is an error.

The compiler inlines both call primitives (`call_jaxpr_param`), so custom rules cost nothing in
compiled code.
"""

from __future__ import annotations

from typing import Callable

from kiln.core.ad_util import has_tangent_space, is_undefined_primal
from kiln.core.avals import ShapedArray
from kiln.core.interpreter import eval_jaxpr, jaxpr_effects
from kiln.core.jaxpr import ClosedJaxpr
from kiln.core.primitive import Primitive
from kiln.primitives.base import zeros_like, zeros_like_aval

__all__ = [
    "custom_jvp_call_p",
    "custom_vjp_call_p",
    "custom_lin_p",
    "stop_gradient_p",
    "stop_gradient",
]


class CustomCallPrimitive(Primitive):
    call_jaxpr_param = "call_jaxpr"

    def params_for_printing(self, params: dict) -> dict:
        shown = {k: v for k, v in params.items() if k not in ("jvp", "fwd", "bwd", "out_trees")}
        for key in ("jvp", "fwd", "bwd"):
            if key in params:
                shown[f"{key}_fun"] = getattr(params[key], "__name__", key)
        return shown


custom_jvp_call_p = CustomCallPrimitive("custom_jvp_call", multiple_results=True)
custom_vjp_call_p = CustomCallPrimitive("custom_vjp_call", multiple_results=True)


def _call_impl(*args, call_jaxpr: ClosedJaxpr, **params):
    from kiln.core.array import Array

    values = [Array._wrap(a) if not isinstance(a, Array) else a for a in args]
    return [
        o._value if isinstance(o, Array) else o
        for o in eval_jaxpr(call_jaxpr.jaxpr, call_jaxpr.consts, *values)
    ]


def _call_abstract_eval(*avals, call_jaxpr: ClosedJaxpr, **params):
    return list(call_jaxpr.jaxpr.out_avals)


for _prim in (custom_jvp_call_p, custom_vjp_call_p):
    _prim.def_impl(_call_impl)
    _prim.def_abstract_eval(_call_abstract_eval)
    _prim.def_effects(lambda *, call_jaxpr, **params: jaxpr_effects(call_jaxpr))


# --- custom_jvp_call ---------------------------------------------------------------------------


@custom_jvp_call_p.def_jvp
def _custom_jvp_call_jvp(
    primals,
    tangents,
    *,
    call_jaxpr,
    jvp: Callable,
    num_consts: int,
    symbolic_zeros: bool,
    name: str,
):
    if any(t is not None for t in tangents[:num_consts]):
        raise TypeError(
            f"Detected differentiation of a custom_jvp function ({name}) with respect to a "
            "closed-over value. That isn't supported because the custom JVP rule only specifies "
            "how to differentiate the custom_jvp function with respect to explicit input "
            "parameters. Pass the value as an explicit argument instead."
        )
    args = primals[num_consts:]
    arg_tangents = tangents[num_consts:]
    if not symbolic_zeros:
        arg_tangents = [_instantiate(t, p) for t, p in zip(arg_tangents, args)]
    outs, out_tangents = jvp(list(args), list(arg_tangents))
    return outs, out_tangents


def _instantiate(tangent, primal):
    from kiln.core.ad_util import float0_zeros
    from kiln.core.avals import get_aval

    aval = get_aval(primal)
    if tangent is not None:
        return tangent
    if not has_tangent_space(aval.dtype):
        return float0_zeros(aval.shape)
    return zeros_like(primal)


@custom_jvp_call_p.def_batching
def _custom_jvp_call_batching(args, dims, *, call_jaxpr, jvp, num_consts, symbolic_zeros, name):
    from kiln.primitives.base import batch_size
    from kiln.transforms.batching import batch_flat, batch_jaxpr

    size = batch_size(args, dims)
    n_out = len(call_jaxpr.jaxpr.outvars)
    batched, _ = batch_jaxpr(call_jaxpr, size, dims, out_dims=[0] * n_out)
    arg_dims = list(dims[num_consts:])

    def batched_jvp(primals, tangents):
        tangents = [_instantiate(t, p) for t, p in zip(tangents, primals)]
        flat_dims = arg_dims + arg_dims

        def run(*flat):
            outs, out_tangents = jvp(list(flat[: len(primals)]), list(flat[len(primals) :]))
            return list(outs) + [_instantiate(t, o) for t, o in zip(out_tangents, outs)]

        results = batch_flat(
            run, list(primals) + list(tangents), flat_dims, size, [0] * (2 * n_out)
        )
        return results[:n_out], results[n_out:]

    batched_jvp.__name__ = getattr(jvp, "__name__", "jvp")
    outs = custom_jvp_call_p.bind(
        *args,
        call_jaxpr=batched,
        jvp=batched_jvp,
        num_consts=num_consts,
        symbolic_zeros=symbolic_zeros,
        name=name,
    )
    return outs, [0] * n_out


# --- custom_vjp_call and custom_lin ------------------------------------------------------------

custom_lin_p = Primitive("custom_lin", multiple_results=True)


@custom_lin_p.def_abstract_eval
def _custom_lin_abstract_eval(*avals, num_res, bwd, out_avals, name):
    return list(out_avals)


@custom_lin_p.def_impl
def _custom_lin_impl(*args, num_res, bwd, out_avals, name):
    raise TypeError(
        f"can't apply forward-mode autodiff (jvp) to a custom_vjp function "
        f"({name}); use reverse mode (kiln.grad, kiln.vjp), or define the "
        "function with kiln.custom_jvp for forward mode."
    )


@custom_lin_p.def_transpose
def _custom_lin_transpose(cts, *args, num_res, bwd, out_avals, name):
    residuals = args[:num_res]
    undefined = args[num_res:]
    cts = [zeros_like_aval(a) if ct is None else ct for ct, a in zip(cts, out_avals)]
    cts_in = bwd(list(residuals), cts)
    result = [None] * num_res
    for ct, arg in zip(cts_in, undefined):
        if not is_undefined_primal(arg) or ct is None or not has_tangent_space(arg.aval.dtype):
            result.append(None)
        else:
            result.append(ct)
    return result


@custom_lin_p.def_batching
def _custom_lin_batching(args, dims, *, num_res, bwd, out_avals, name):
    from kiln.primitives.base import batch_size
    from kiln.transforms.batching import move_to

    size = batch_size(args, dims)
    args = [move_to(a, d, 0, size) for a, d in zip(args, dims)]
    res_dims = [0] * num_res

    def batched_bwd(residuals, cts):
        from kiln.transforms.batching import batch_flat

        n_in = len(args) - num_res

        def run(*flat):
            outs = bwd(list(flat[:num_res]), list(flat[num_res:]))
            return [
                zeros_like_aval(a.aval) if o is None else o for o, a in zip(outs, _undefined_avals)
            ]

        return batch_flat(
            run, list(residuals) + list(cts), res_dims + [0] * len(cts), size, [0] * n_in
        )

    _undefined_avals = [_Aval(a, size) for a in args[num_res:]]
    batched_out_avals = [a.update(shape=(size,) + tuple(a.shape)) for a in out_avals]
    outs = custom_lin_p.bind(
        *args, num_res=num_res, bwd=batched_bwd, out_avals=tuple(batched_out_avals), name=name
    )
    return outs, [0] * len(outs)


class _Aval:
    """The per-example aval of a batched tangent (the aval bwd's cotangent must have)."""

    def __init__(self, batched, size):
        from kiln.core.avals import get_aval

        aval = get_aval(batched)
        self.aval = aval.update(shape=tuple(aval.shape[1:]))


@custom_vjp_call_p.def_jvp
def _custom_vjp_call_jvp(
    primals,
    tangents,
    *,
    call_jaxpr,
    fwd: Callable,
    bwd: Callable,
    num_consts: int,
    out_trees,
    symbolic_zeros: bool,
    name: str,
):
    if any(t is not None for t in tangents[:num_consts]):
        raise TypeError(
            f"Detected differentiation of a custom_vjp function ({name}) with respect to a "
            "closed-over value. That isn't supported because the custom VJP rule only specifies "
            "how to differentiate the custom_vjp function with respect to explicit input "
            "parameters. Pass the value as an explicit argument instead."
        )
    args = primals[num_consts:]
    outs, residuals = fwd(list(args))
    arg_tangents = [_instantiate(t, p) for t, p in zip(tangents[num_consts:], args)]
    float_tangents = [t for t, p in zip(arg_tangents, args) if _has_tangent(p)]
    mask = [_has_tangent(p) for p in args]

    def bwd_float(res, cts):
        cts_in = bwd(res, cts)
        return [c for c, m in zip(cts_in, mask) if m]

    bwd_float.__name__ = getattr(bwd, "__name__", "bwd")

    from kiln.core.avals import get_aval

    out_avals = tuple(get_aval(o) for o in outs)
    out_tangents = custom_lin_p.bind(
        *residuals,
        *float_tangents,
        num_res=len(residuals),
        bwd=bwd_float,
        out_avals=out_avals,
        name=name,
    )
    return outs, [t if _has_tangent(o) else None for t, o in zip(out_tangents, outs)]


def _has_tangent(x) -> bool:
    from kiln.core.avals import get_aval

    return has_tangent_space(get_aval(x).dtype)


@custom_vjp_call_p.def_batching
def _custom_vjp_call_batching(
    args, dims, *, call_jaxpr, fwd, bwd, num_consts, out_trees, symbolic_zeros, name
):
    from kiln.primitives.base import batch_size
    from kiln.transforms.batching import batch_flat, batch_jaxpr

    size = batch_size(args, dims)
    n_out = len(call_jaxpr.jaxpr.outvars)
    batched, _ = batch_jaxpr(call_jaxpr, size, dims, out_dims=[0] * n_out)
    arg_dims = list(dims[num_consts:])
    box = {}

    def batched_fwd(primals):
        def run(*flat):
            outs, res = fwd(list(flat))
            box["n_res"] = len(res)
            return list(outs) + list(res)

        results = batch_flat(run, list(primals), arg_dims, size, lambda n: [0] * n)
        return results[:n_out], results[n_out:]

    def batched_bwd(res, cts):
        from kiln.primitives.reductions import reduce_sum
        from kiln.transforms.batching import move_to

        def run(*flat):
            outs = bwd(list(flat[: len(res)]), list(flat[len(res) :]))
            return [
                zeros_like_aval(p.aval) if o is None else o for o, p in zip(outs, _example_args)
            ]

        _example_args = [_Example(a, d) for a, d in zip(args[num_consts:], arg_dims)]
        cts_in = batch_flat(
            run, list(res) + list(cts), [0] * (len(res) + len(cts)), size, lambda n: [0] * n
        )
        result = []
        for ct, d in zip(cts_in, arg_dims):
            result.append(reduce_sum(ct, (0,)) if d is None else move_to(ct, 0, d, size))
        return result

    batched_fwd.__name__ = getattr(fwd, "__name__", "fwd")
    batched_bwd.__name__ = getattr(bwd, "__name__", "bwd")
    outs = custom_vjp_call_p.bind(
        *args,
        call_jaxpr=batched,
        fwd=batched_fwd,
        bwd=batched_bwd,
        num_consts=num_consts,
        out_trees=out_trees,
        symbolic_zeros=symbolic_zeros,
        name=name,
    )
    return outs, [0] * n_out


class _Example:
    """Shape and dtype of one example of an argument (for zero cotangents)."""

    def __init__(self, arg, dim):
        from kiln.core.avals import get_aval

        aval = get_aval(arg)
        shape = tuple(aval.shape)
        if dim is not None:
            shape = shape[:dim] + shape[dim + 1 :]
        self.aval = ShapedArray(shape, aval.dtype, aval.weak_type)
        self.shape, self.dtype = shape, aval.dtype


# --- stop_gradient -------------------------------------------------------------------------------
# The identity with a zero derivative: differentiation treats its output as a constant.

stop_gradient_p = Primitive("stop_gradient")
stop_gradient_p.def_impl(lambda x: x)
stop_gradient_p.def_abstract_eval(lambda x: x)


@stop_gradient_p.def_jvp
def _stop_gradient_jvp(primals, tangents):
    return stop_gradient_p.bind(primals[0]), None


@stop_gradient_p.def_batching
def _stop_gradient_batching(args, dims):
    return stop_gradient_p.bind(args[0]), dims[0]


def stop_gradient(x):
    """`x`, with a zero derivative: every leaf of the pytree `x` is held constant by
    differentiation (integer leaves pass through)."""
    from kiln import api_util
    from kiln.core.avals import get_aval

    def stop(leaf):
        if not has_tangent_space(get_aval(leaf).dtype):
            return leaf
        return stop_gradient_p.bind(leaf)

    leaves, tree = api_util.flatten(x)
    return api_util.unflatten(tree, [stop(leaf) for leaf in leaves])
