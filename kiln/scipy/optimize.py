"""kiln.scipy.optimize: unconstrained minimization by BFGS (jax.scipy.optimize.minimize).

The whole solve is one `lax.while_loop` (so it runs under jit and vmap): each step searches
along -H g for a point that meets the strong Wolfe conditions, with the bracketing and zoom
phases of Nocedal and Wright's Algorithm 3.5/3.6 (cubic, then quadratic, then bisection
interpolation), and updates the inverse Hessian estimate H by the BFGS formula.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln.core import dtypes

__all__ = ["minimize", "OptimizeResults", "line_search"]


class OptimizeResults(NamedTuple):
    """The result of `minimize`.

    x: the solution; success: converged without a line-search failure; status: 0 converged,
    1 maximum BFGS iterations reached, 3 zoom failed, 4 saddle point reached, 5 maximum line
    search iterations reached, -1 undefined; fun, jac: the value and gradient at x; hess_inv:
    the inverse Hessian estimate; nfev, njev: function and gradient evaluations; nit: the
    number of iterations."""

    x: Any
    success: Any
    status: Any
    fun: Any
    jac: Any
    hess_inv: Any
    nfev: Any
    njev: Any
    nit: Any


class LineSearchResults(NamedTuple):
    """The result of `line_search`: a_k is the step, f_k and g_k the value and gradient there;
    status 0 passed, 1 zoom failed, 3 maximum iterations reached."""

    failed: Any
    nit: Any
    nfev: Any
    ngev: Any
    k: Any
    a_k: Any
    f_k: Any
    g_k: Any
    status: Any


def _where(pred, new: dict, old: dict) -> dict:
    """`old` with the entries of `new` taken where `pred` holds."""
    out = dict(old)
    for name, value in new.items():
        out[name] = jnp.where(pred, value, old[name])
    return out


def _cubic_minimizer(a, fa, fpa, b, fb, c, fc):
    """The minimizer of the cubic through (a, fa) with slope fpa, (b, fb) and (c, fc)."""
    db, dc = b - a, c - a
    denom = (db * dc) ** 2 * (db - dc)
    rhs_b = fb - fa - fpa * db
    rhs_c = fc - fa - fpa * dc
    big_a = (dc**2 * rhs_b - db**2 * rhs_c) / denom
    big_b = (-(dc**3) * rhs_b + db**3 * rhs_c) / denom
    radical = big_b * big_b - 3.0 * big_a * fpa
    return a + (-big_b + jnp.sqrt(radical)) / (3.0 * big_a)


def _quadratic_minimizer(a, fa, fpa, b, fb):
    """The minimizer of the parabola through (a, fa) with slope fpa and (b, fb)."""
    db = b - a
    curvature = (fb - fa - fpa * db) / (db**2)
    return a - fpa / (2.0 * curvature)


def _zoom(phi_and_grad, wolfe_one, wolfe_two, lo, hi, g_0, pass_through):
    """Shrink the bracket [lo, hi] (each a (step, value, slope) triple) until a step meets
    both Wolfe conditions; `pass_through` skips the search (the loop runs zero times)."""
    a_lo, phi_lo, dphi_lo = lo
    a_hi, phi_hi, dphi_hi = hi
    one = jnp.ones_like(a_lo)
    state = dict(
        done=jnp.asarray(False),
        failed=jnp.asarray(False),
        j=jnp.asarray(0),
        a_lo=a_lo,
        phi_lo=phi_lo,
        dphi_lo=dphi_lo,
        a_hi=a_hi,
        phi_hi=phi_hi,
        dphi_hi=dphi_hi,
        a_rec=(a_lo + a_hi) / 2.0,
        phi_rec=(phi_lo + phi_hi) / 2.0,
        a_star=one,
        phi_star=phi_lo,
        dphi_star=dphi_lo,
        g_star=g_0,
        nfev=jnp.asarray(0),
        ngev=jnp.asarray(0),
    )
    threshold = 1e-5 if dtypes.finfo(np.dtype(a_lo.dtype)).bits < 64 else 1e-10

    def body(s):
        dalpha = s["a_hi"] - s["a_lo"]
        low = jnp.minimum(s["a_hi"], s["a_lo"])
        high = jnp.maximum(s["a_hi"], s["a_lo"])
        cubic_margin, quad_margin = 0.2 * dalpha, 0.1 * dalpha
        s = dict(s, failed=s["failed"] | (dalpha <= threshold))
        a_cubic = _cubic_minimizer(
            s["a_lo"], s["phi_lo"], s["dphi_lo"], s["a_hi"], s["phi_hi"], s["a_rec"], s["phi_rec"]
        )
        use_cubic = (s["j"] > 0) & (a_cubic > low + cubic_margin) & (a_cubic < high - cubic_margin)
        a_quad = _quadratic_minimizer(s["a_lo"], s["phi_lo"], s["dphi_lo"], s["a_hi"], s["phi_hi"])
        use_quad = (~use_cubic) & (a_quad > low + quad_margin) & (a_quad < high - quad_margin)
        a_j = jnp.where(use_cubic, a_cubic, s["a_rec"])
        a_j = jnp.where(use_quad, a_quad, a_j)
        a_j = jnp.where((~use_cubic) & (~use_quad), (s["a_lo"] + s["a_hi"]) / 2.0, a_j)
        phi_j, dphi_j, g_j = phi_and_grad(a_j)
        phi_j = phi_j.astype(s["phi_lo"].dtype)
        dphi_j = dphi_j.astype(s["dphi_lo"].dtype)
        s = dict(s, nfev=s["nfev"] + 1, ngev=s["ngev"] + 1)
        hi_to_j = wolfe_one(a_j, phi_j) | (phi_j >= s["phi_lo"])
        star_to_j = wolfe_two(dphi_j) & (~hi_to_j)
        hi_to_lo = (dphi_j * (s["a_hi"] - s["a_lo"]) >= 0.0) & (~hi_to_j) & (~star_to_j)
        lo_to_j = (~hi_to_j) & (~star_to_j)
        s = _where(
            hi_to_j,
            dict(a_hi=a_j, phi_hi=phi_j, dphi_hi=dphi_j, a_rec=s["a_hi"], phi_rec=s["phi_hi"]),
            s,
        )
        s = dict(s, done=star_to_j | s["done"])
        s = _where(star_to_j, dict(a_star=a_j, phi_star=phi_j, dphi_star=dphi_j, g_star=g_j), s)
        s = _where(
            hi_to_lo,
            dict(
                a_hi=s["a_lo"],
                phi_hi=s["phi_lo"],
                dphi_hi=s["dphi_lo"],
                a_rec=s["a_hi"],
                phi_rec=s["phi_hi"],
            ),
            s,
        )
        s = _where(lo_to_j & ~hi_to_lo, dict(a_rec=s["a_lo"], phi_rec=s["phi_lo"]), s)
        s = _where(lo_to_j, dict(a_lo=a_j, phi_lo=phi_j, dphi_lo=dphi_j), s)
        j = s["j"] + 1
        return dict(s, j=j, failed=s["failed"] | (j >= 30))

    return lax.while_loop(lambda s: (~s["done"]) & (~pass_through) & (~s["failed"]), body, state)


def line_search(
    f: Callable,
    xk,
    pk,
    old_fval=None,
    old_old_fval=None,
    gfk=None,
    c1: float = 1e-4,
    c2: float = 0.9,
    maxiter: int = 20,
) -> LineSearchResults:
    """A step along the descent direction `pk` from `xk` satisfying the strong Wolfe
    conditions (sufficient decrease c1, curvature c2)."""
    from kiln.transforms.ad import value_and_grad

    xk, pk = jnp.asarray(xk), jnp.asarray(pk)
    if not dtypes.is_inexact(xk.dtype):
        xk = xk.astype(dtypes.default_float())
    pk = pk.astype(xk.dtype)

    def phi_and_grad(step):
        step = jnp.asarray(step, dtype=pk.dtype)
        phi, g = value_and_grad(f)(xk + step * pk)
        return phi, jnp.real(jnp.dot(g, pk)), g

    fresh = old_fval is None or gfk is None
    if fresh:
        phi_0, dphi_0, gfk = phi_and_grad(0.0)
    else:
        phi_0 = jnp.asarray(old_fval)
        dphi_0 = jnp.real(jnp.dot(gfk, pk))
    if old_old_fval is not None:
        candidate = 1.01 * 2 * (phi_0 - old_old_fval) / dphi_0
        start = jnp.where(candidate > 1, 1.0, candidate).astype(pk.dtype)
    else:
        start = jnp.ones((), pk.dtype)

    def wolfe_one(a_i, phi_i):
        return phi_i > phi_0 + c1 * a_i * dphi_0

    def wolfe_two(dphi_i):
        return jnp.abs(dphi_i) <= -c2 * dphi_0

    zero = jnp.zeros((), pk.dtype)
    state = dict(
        done=jnp.asarray(False),
        failed=jnp.asarray(False),
        i=jnp.asarray(1),
        a_i1=zero,
        phi_i1=phi_0,
        dphi_i1=dphi_0,
        nfev=jnp.asarray(1 if fresh else 0),
        ngev=jnp.asarray(1 if fresh else 0),
        a_star=zero,
        phi_star=phi_0,
        dphi_star=dphi_0,
        g_star=gfk,
    )
    star_keys = ("a_star", "phi_star", "dphi_star", "g_star")

    def body(s):
        a_i = jnp.where(s["i"] == 1, start, s["a_i1"] * 2.0)
        phi_i, dphi_i, g_i = phi_and_grad(a_i)
        s = dict(s, nfev=s["nfev"] + 1, ngev=s["ngev"] + 1)
        to_zoom1 = wolfe_one(a_i, phi_i) | ((phi_i >= s["phi_i1"]) & (s["i"] > 1))
        to_i = wolfe_two(dphi_i) & (~to_zoom1)
        to_zoom2 = (dphi_i >= 0.0) & (~to_zoom1) & (~to_i)
        previous = (s["a_i1"], s["phi_i1"], s["dphi_i1"])
        current = (a_i, phi_i, dphi_i)
        zoom1 = _zoom(phi_and_grad, wolfe_one, wolfe_two, previous, current, gfk, ~to_zoom1)
        s = dict(s, nfev=s["nfev"] + zoom1["nfev"], ngev=s["ngev"] + zoom1["ngev"])
        zoom2 = _zoom(phi_and_grad, wolfe_one, wolfe_two, current, previous, gfk, ~to_zoom2)
        s = dict(s, nfev=s["nfev"] + zoom2["nfev"], ngev=s["ngev"] + zoom2["ngev"])
        s = dict(s, done=to_zoom1 | s["done"], failed=(to_zoom1 & zoom1["failed"]) | s["failed"])
        s = _where(to_zoom1, {k: zoom1[k] for k in star_keys}, s)
        s = dict(s, done=to_i | s["done"])
        s = _where(to_i, dict(a_star=a_i, phi_star=phi_i, dphi_star=dphi_i, g_star=g_i), s)
        s = dict(s, done=to_zoom2 | s["done"], failed=(to_zoom2 & zoom2["failed"]) | s["failed"])
        s = _where(to_zoom2, {k: zoom2[k] for k in star_keys}, s)
        return dict(s, i=s["i"] + 1, a_i1=a_i, phi_i1=phi_i, dphi_i1=dphi_i)

    s = lax.while_loop(lambda s: (~s["done"]) & (s["i"] <= maxiter) & (~s["failed"]), body, state)
    status = jnp.where(s["failed"], 1, jnp.where(s["i"] > maxiter, 3, 0))
    step = s["a_star"]
    if dtypes.finfo(np.dtype(step.dtype)).bits != 64:
        # Keep float32 steps from vanishing: a step below 1e-8 becomes +-1e-8.
        step = jnp.where(jnp.abs(step) < 1e-8, jnp.sign(step) * 1e-8, step)
    return LineSearchResults(
        failed=s["failed"] | (~s["done"]),
        nit=s["i"] - 1,
        nfev=s["nfev"],
        ngev=s["ngev"],
        k=s["i"],
        a_k=step,
        f_k=s["phi_star"],
        g_k=s["g_star"],
        status=status,
    )


def _minimize_bfgs(fun, x0, maxiter=None, norm=np.inf, gtol: float = 1e-5, line_search_maxiter=10):
    """BFGS (Nocedal and Wright, Algorithm 6.1) from x0, a 1-d array."""
    from kiln.transforms.ad import value_and_grad

    if maxiter is None:
        maxiter = int(np.size(x0)) * 200
    n = x0.shape[0]
    f_0, g_0 = value_and_grad(fun)(x0)
    state = dict(
        converged=jnp.linalg.norm(g_0, ord=norm) < gtol,
        failed=jnp.asarray(False),
        k=jnp.asarray(0),
        nfev=jnp.asarray(1),
        ngev=jnp.asarray(1),
        x_k=x0,
        f_k=f_0,
        g_k=g_0,
        H_k=jnp.eye(n, dtype=x0.dtype),
        old_old_fval=f_0 + jnp.linalg.norm(g_0) / 2,
        line_search_status=jnp.asarray(0),
    )

    def body(s):
        p_k = -jnp.dot(s["H_k"], s["g_k"])
        ls = line_search(
            fun,
            s["x_k"],
            p_k,
            old_fval=s["f_k"],
            old_old_fval=s["old_old_fval"],
            gfk=s["g_k"],
            maxiter=line_search_maxiter,
        )
        s_k = ls.a_k.astype(p_k.dtype) * p_k
        y_k = ls.g_k - s["g_k"]
        rho_k = jnp.reciprocal(jnp.dot(y_k, s_k))
        w = jnp.eye(n, dtype=rho_k.dtype) - rho_k * (s_k[:, None] * y_k[None, :])
        h_next = w @ s["H_k"] @ w.T + rho_k * (s_k[:, None] * s_k[None, :])
        h_next = jnp.where(jnp.isfinite(rho_k), h_next, s["H_k"])
        return dict(
            s,
            nfev=s["nfev"] + ls.nfev,
            ngev=s["ngev"] + ls.ngev,
            failed=ls.failed,
            line_search_status=ls.status,
            converged=jnp.linalg.norm(ls.g_k, ord=norm) < gtol,
            k=s["k"] + 1,
            x_k=s["x_k"] + s_k,
            f_k=ls.f_k,
            g_k=ls.g_k,
            H_k=h_next,
            old_old_fval=s["f_k"],
        )

    s = lax.while_loop(
        lambda s: (~s["converged"]) & (~s["failed"]) & (s["k"] < maxiter), body, state
    )
    status = jnp.where(
        s["converged"],
        0,
        jnp.where(s["k"] == maxiter, 1, jnp.where(s["failed"], 2 + s["line_search_status"], -1)),
    )
    return s, status


def minimize(
    fun: Callable,
    x0,
    args: tuple = (),
    *,
    method: str,
    tol: float | None = None,
    options: Mapping[str, Any] | None = None,
) -> OptimizeResults:
    """Minimize the scalar function `fun(x, *args)` of a 1-d array x, from x0.

    method: "BFGS" (case-insensitive). options: maxiter (default 200 * x0.size), norm (of
    the gradient in the convergence test, default inf), gtol (default 1e-5),
    line_search_maxiter (default 10). tol is accepted for SciPy compatibility and, as in
    JAX, not used: set options["gtol"] instead."""
    options = {} if options is None else dict(options)
    if not isinstance(args, tuple):
        raise TypeError(f"args argument to jax.scipy.optimize.minimize must be a tuple, got {args}")
    if method.lower() != "bfgs":
        raise ValueError(f"Method {method} not recognized")
    x0 = jnp.asarray(x0)
    if not dtypes.is_inexact(x0.dtype):
        x0 = x0.astype(dtypes.default_float())

    def objective(x):
        return fun(x, *args)

    s, status = _minimize_bfgs(objective, x0, **options)
    return OptimizeResults(
        x=s["x_k"],
        success=s["converged"] & (~s["failed"]),
        status=status,
        fun=s["f_k"],
        jac=s["g_k"],
        hess_inv=s["H_k"],
        nfev=s["nfev"],
        njev=s["ngev"],
        nit=s["k"],
    )
