"""Testing derivatives: `check_grads` compares kiln's forward and reverse derivatives with
central finite differences along random directions, to any order.

Forward mode: `jvp(f, x, t)` against (f(x + eps t) - f(x - eps t)) / (2 eps). Reverse mode: the
adjoint identity <t, vjp(ct)> == <ct, J t>, with J t from finite differences. Order n checks
the (n-1)-th derivative functions the same way (the jvp of the jvp, the vjp of the vjp).
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np

from kiln import api_util
from kiln.core import dtypes
from kiln.core.ad_util import float0
from kiln.core.avals import get_aval

EPS = 1e-4

_DEFAULT_TOL = {
    np.dtype(np.float16): 1e-2,
    np.dtype(dtypes.bfloat16): 1e-1,
    np.dtype(np.float32): 2e-3,
    np.dtype(np.float64): 1e-5,
    np.dtype(np.complex64): 1e-3,
    np.dtype(np.complex128): 1e-5,
}


def _tolerance(dtype, tol) -> float:
    if tol is not None:
        if isinstance(tol, dict):
            return tol.get(np.dtype(dtype), _DEFAULT_TOL.get(np.dtype(dtype), 1e-5))
        return tol
    return _DEFAULT_TOL.get(np.dtype(dtype), 1e-5)


def _leaves(tree) -> list:
    return api_util.flatten(tree)[0]


def _to_numpy(x) -> np.ndarray:
    return np.asarray(x)


def _is_float0(x) -> bool:
    return isinstance(x, (np.ndarray, np.generic)) and x.dtype == float0


def _rand_like(rng: np.random.RandomState, tree):
    """A random tree shaped like `tree` (float0 zeros for integer leaves)."""

    def one(x):
        aval = get_aval(x)
        if not dtypes.is_inexact(aval.dtype):
            return np.zeros(aval.shape, float0)
        value = rng.randn(*aval.shape)
        if dtypes.is_complex(aval.dtype):
            value = value + 1j * rng.randn(*aval.shape)
        return np.asarray(value, dtype=aval.dtype)

    leaves, tree_def = api_util.flatten(tree)
    return api_util.unflatten(tree_def, [one(x) for x in leaves])


def _add_scaled(tree, tangent, scale: float):
    def one(x, t):
        if _is_float0(t):
            return x
        x = _to_numpy(x)
        return (x + scale * _to_numpy(t).astype(x.dtype)).astype(x.dtype)

    leaves, tree_def = api_util.flatten(tree)
    return api_util.unflatten(tree_def, [one(x, t) for x, t in zip(leaves, _leaves(tangent))])


def _inner_product(xs, ys) -> float:
    """The real inner product Re(sum(conj(x) * y)) over all leaves (complex numbers count as
    pairs of reals, so the adjoint identity holds for real-linear maps of complex values)."""
    total = 0.0
    for x, y in zip(_leaves(xs), _leaves(ys)):
        if _is_float0(x) or _is_float0(y):
            continue
        total = total + float(
            np.real(
                np.sum(
                    np.conj(_to_numpy(x).astype(np.complex128)) * _to_numpy(y).astype(np.complex128)
                )
            )
        )
    return total


def numerical_jvp(f: Callable, primals: Sequence, tangents: Sequence, eps: float = EPS):
    """(f(x + eps t) - f(x - eps t)) / (2 eps), leaf by leaf."""
    f_pos = f(*_add_scaled(tuple(primals), tuple(tangents), eps))
    f_neg = f(*_add_scaled(tuple(primals), tuple(tangents), -eps))
    leaves_pos, tree_def = api_util.flatten(f_pos)
    out = []
    for p, n in zip(leaves_pos, _leaves(f_neg)):
        p, n = _to_numpy(p), _to_numpy(n)
        if not dtypes.is_inexact(p.dtype):
            out.append(np.zeros(p.shape, float0))
            continue
        out.append(
            (
                (p.astype(np.complex128 if p.dtype.kind == "c" else np.float64) - n) * (0.5 / eps)
            ).astype(p.dtype)
        )
    return api_util.unflatten(tree_def, out)


def _check_close(x, y, atol, rtol, err_msg: str) -> None:
    for a, b in zip(_leaves(x), _leaves(y)):
        if _is_float0(a) or _is_float0(b):
            continue
        a, b = _to_numpy(a), _to_numpy(b)
        dtype = a.dtype if a.dtype.kind in "fc" else np.dtype(np.float64)
        np.testing.assert_allclose(
            a.astype(np.complex128 if dtype.kind == "c" else np.float64),
            b.astype(np.complex128 if dtype.kind == "c" else np.float64),
            atol=_tolerance(dtype, atol),
            rtol=_tolerance(dtype, rtol),
            err_msg=err_msg,
        )


def check_jvp(
    f: Callable,
    f_jvp: Callable,
    args: Sequence,
    atol=None,
    rtol=None,
    eps: float = EPS,
    err_msg: str = "",
) -> None:
    """`f_jvp(args, tangents)` against finite differences of `f` at `args`."""
    rng = np.random.RandomState(0)
    tangent = _rand_like(rng, tuple(args))
    v_out, t_out = f_jvp(tuple(args), tangent)
    _check_close(v_out, f(*args), atol, rtol, err_msg + " (primal output)")
    t_expected = numerical_jvp(f, args, tangent, eps)
    _check_close(t_out, t_expected, atol, rtol, err_msg + " (tangent output)")


def check_vjp(
    f: Callable,
    f_vjp: Callable,
    args: Sequence,
    atol=None,
    rtol=None,
    eps: float = EPS,
    err_msg: str = "",
) -> None:
    """The adjoint identity <t, vjp(ct)> == <ct, (finite-difference) J t>."""
    rng = np.random.RandomState(0)
    v_out, vjp_fun = f_vjp(*args)
    _check_close(v_out, f(*args), atol, rtol, err_msg + " (primal output)")
    tangent = _rand_like(rng, tuple(args))
    tangent_out = numerical_jvp(f, args, tangent, eps)
    cotangent = _rand_like(rng, v_out)
    cotangent_out = vjp_fun(_conj(cotangent))
    ip = _inner_product(tangent, _conj(cotangent_out))
    ip_expected = _inner_product(tangent_out, cotangent)
    dtype = next(
        (
            np.dtype(get_aval(x).dtype)
            for x in _leaves(v_out)
            if dtypes.is_inexact(get_aval(x).dtype)
        ),
        np.dtype(np.float64),
    )
    scale = max(1.0, float(np.abs(ip_expected)))
    np.testing.assert_allclose(
        ip,
        ip_expected,
        atol=_tolerance(dtype, atol) * scale,
        rtol=_tolerance(dtype, rtol),
        err_msg=err_msg + " (vjp adjoint identity)",
    )


def _conj(tree):
    def one(x):
        if _is_float0(x):
            return x
        x = _to_numpy(x)
        return np.conj(x) if x.dtype.kind == "c" else x

    leaves, tree_def = api_util.flatten(tree)
    return api_util.unflatten(tree_def, [one(x) for x in leaves])


def check_grads(
    f: Callable,
    args: Sequence,
    order: int,
    modes=("fwd", "rev"),
    atol=None,
    rtol=None,
    eps: float | None = None,
) -> None:
    """Check the derivatives of `f` at `args` up to `order` in the given modes (raises an
    AssertionError that says which mode and order disagreed)."""
    from kiln.transforms.ad import jvp, vjp

    eps = eps or EPS
    args = tuple(args)

    def check(fun, fun_args, n, msg):
        if n == 0:
            return
        if "fwd" in modes:
            fwd_msg = f"{msg}JVP of order {order - n + 1}"
            check_jvp(fun, functools.partial(jvp, fun), fun_args, atol, rtol, eps, fwd_msg)
            if n > 1:
                check(functools.partial(jvp, fun), (fun_args, fun_args), n - 1, fwd_msg + " of ")
        if "rev" in modes:
            rev_msg = f"{msg}VJP of order {order - n + 1}"
            check_vjp(fun, functools.partial(vjp, fun), fun_args, atol, rtol, eps, rev_msg)
            if n > 1:

                def f_vjp(*xs):
                    out, pullback = vjp(fun, *xs)
                    return pullback(out)

                check(f_vjp, fun_args, n - 1, rev_msg + " of ")

    check(f, args, order, "")
