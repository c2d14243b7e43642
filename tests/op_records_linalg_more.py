"""Op-record rows of the Householder reductions, Schur-based functions and polar decompositions
(kiln.lax.linalg hessenberg, tridiagonal, householder_product, ormqr, schur,
symmetric_product, qdwh; kiln.scipy.linalg schur, rsf2csf, hessenberg, sqrtm, funm, polar),
against SciPy's LAPACK wrappers one matrix at a time, in float64 (complex128).

Factors that LAPACK fixes (gehrd's and sytrd's reflectors, orgqr's and ormqr's products) are
compared directly; a Schur form, whose 2 x 2 blocks depend on rounding, through the
reconstruction Z T Z^H and the zeros below its (sub)diagonal. Appended to LINALG_RECORDS by
tests/op_records_linalg.py.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.linalg import lapack

import kiln.numpy as jnp
import kiln.scipy.linalg as ksl
from kiln import lax
from tests.op_records_linalg import DTYPES, F32, _row, spd, wide, well_conditioned

REAL = [F32]


def _per_matrix(fn, *arrays):
    """fn over the matrices of arrays with common leading dimensions; results stacked."""
    batch = np.asarray(arrays[0]).shape[:-2]
    flat = [np.asarray(a).reshape((-1,) + np.asarray(a).shape[len(batch) :]) for a in arrays]
    parts = [fn(*items) for items in zip(*flat)]
    if isinstance(parts[0], tuple):
        return tuple(
            np.stack([p[i] for p in parts]).reshape(batch + parts[0][i].shape)
            for i in range(len(parts[0]))
        )
    return np.stack(parts).reshape(batch + parts[0].shape)


def _lapack(name, a):
    return lapack.get_lapack_funcs(name, (a,))


def np_hessenberg(a):
    def one(m):
        out, tau, _ = _lapack("gehrd", m)(m)
        return out, tau[: max(m.shape[0] - 1, 0)]

    return _per_matrix(one, wide(a))


def np_tridiagonal(lower):
    def ref(a):
        a = wide(a)

        def one(m):
            name = "hetrd" if m.dtype.kind == "c" else "sytrd"
            out, d, e, tau, _ = _lapack(name, m)(m, lower=int(lower))
            return out, d, e, tau

        return _per_matrix(one, a)

    return ref


def np_householder_product(a, taus):
    def one(m, t):
        name = "ungqr" if m.dtype.kind == "c" else "orgqr"
        q, _, _ = _lapack(name, m)(m, t)
        return q

    return _per_matrix(one, wide(a), wide(taus)[..., None, :])


def np_ormqr(left, transpose):
    def ref(a, taus, c):
        def one(m, t, x):
            complex_ = m.dtype.kind == "c"
            name = "unmqr" if complex_ else "ormqr"
            trans = ("C" if complex_ else "T") if transpose else "N"
            routine = _lapack(name, m)
            k = t.shape[-1]
            lwork = 64 * max(x.shape)
            return routine("L" if left else "R", trans, m[:, :k], t[0], x, lwork)[0]

        return _per_matrix(one, wide(a), wide(taus)[..., None, :], wide(c))

    return ref


def _schur_check(t, z, a, complex_form):
    """(Z T Z^H - a, the entries of T that must be zero), both expected to vanish."""
    reconstruction = z @ t @ jnp.conj(jnp.swapaxes(z, -1, -2)) - a.astype(z.dtype)
    below = jnp.tril(t, -1 if complex_form else -2)
    return reconstruction, below


def kiln_lax_schur(a):
    t, z = lax.linalg.schur(a)
    return _schur_check(t, z, a, jnp.iscomplexobj(a))


def kiln_scipy_schur_complex(a):
    t, z = ksl.schur(a, output="complex")
    return _schur_check(t, z, a, True)


def np_schur_zeros(a):
    zeros = np.zeros(a.shape, wide(a).dtype)
    return zeros, zeros


def np_complex_schur_zeros(a):
    zeros = np.zeros(a.shape, np.complex128)
    return zeros, zeros


def real_schur_form(shape, dtype, rng):
    """Real Schur forms (quasi upper triangular) of random matrices."""
    a = rng.standard_normal(shape)
    return _per_matrix(lambda m: scipy.linalg.schur(m)[0], a).astype(dtype)


def orthogonal(shape, dtype, rng):
    a = rng.standard_normal(shape)
    return _per_matrix(lambda m: scipy.linalg.qr(m)[0], a).astype(dtype)


def reflector_scales(shape, dtype, rng):
    """Householder scale factors in [1, 2], as geqrf produces for unit-norm reflectors."""
    return (1 + rng.uniform(size=shape)).astype(dtype)


def np_rsf2csf(t, z):
    return _per_matrix(lambda a, b: scipy.linalg.rsf2csf(a, b), wide(t), wide(z))


def np_symmetric_product(a, c):
    a, c = wide(a), wide(c)
    return 0.5 * a @ np.swapaxes(a, -1, -2) - 2.0 * c


def kiln_hessenberg_q(a):
    h, q = ksl.hessenberg(a, calc_q=True)
    return h, q


def np_hessenberg_q(a):
    return _per_matrix(lambda m: scipy.linalg.hessenberg(m, calc_q=True), wide(a))


def np_polar(side):
    return lambda a: _per_matrix(lambda m: scipy.linalg.polar(m, side=side), wide(a))


SQUARE = [((4, 4),), ((2, 3, 3),)]

MORE_ROWS = [
    _row(
        "lax.linalg.hessenberg",
        lax.linalg.hessenberg,
        np_hessenberg,
        SQUARE + [((1, 1),)],
        differentiable=False,
    ),
    _row(
        "lax.linalg.tridiagonal-lower",
        lambda a: lax.linalg.tridiagonal(a, lower=True),
        np_tridiagonal(True),
        SQUARE,
        spd,
        differentiable=False,
    ),
    _row(
        "lax.linalg.tridiagonal-upper",
        lambda a: lax.linalg.tridiagonal(a, lower=False),
        np_tridiagonal(False),
        SQUARE,
        spd,
        differentiable=False,
    ),
    _row(
        "lax.linalg.householder_product",
        lax.linalg.householder_product,
        np_householder_product,
        [((5, 3), (3,)), ((2, 4, 4), (2, 2))],
        ("normal", reflector_scales),
        differentiable=False,
    ),
    _row(
        "lax.linalg.schur",
        kiln_lax_schur,
        np_schur_zeros,
        SQUARE,
        differentiable=False,
    ),
    _row(
        "lax.linalg.symmetric_product",
        lambda a, c: lax.linalg.symmetric_product(a, c, alpha=0.5, beta=-2.0),
        np_symmetric_product,
        [((3, 4), (3, 3)), ((2, 3, 2), (2, 3, 3))],
        dtypes=REAL,
        differentiable=False,
    ),
    _row(
        "lax.linalg.qdwh",
        lambda a: lax.linalg.qdwh(a)[:2],
        np_polar("right"),
        [((4, 4),), ((5, 3),)],
        differentiable=False,
    ),
    _row(
        "scipy.linalg.schur-complex",
        kiln_scipy_schur_complex,
        np_complex_schur_zeros,
        SQUARE,
        differentiable=False,
    ),
    _row(
        "scipy.linalg.rsf2csf",
        ksl.rsf2csf,
        np_rsf2csf,
        [((4, 4), (4, 4)), ((2, 3, 3), (2, 3, 3))],
        (real_schur_form, orthogonal),
        dtypes=REAL,
        differentiable=False,
    ),
    _row(
        "scipy.linalg.hessenberg",
        kiln_hessenberg_q,
        np_hessenberg_q,
        [((4, 4),), ((3, 3),)],
        differentiable=False,
    ),
    _row(
        "scipy.linalg.sqrtm",
        ksl.sqrtm,
        lambda a: scipy.linalg.sqrtm(wide(a)).astype(np.complex128),
        [((4, 4),), ((1, 1),)],
        spd,
        differentiable=False,
    ),
    _row(
        "scipy.linalg.funm-exp",
        lambda a: ksl.funm(a, jnp.exp),
        lambda a: scipy.linalg.expm(wide(a)).astype(np.complex128),
        [((3, 3),), ((4, 4),)],
        well_conditioned,
        dtypes=REAL,
        differentiable=False,
    ),
    _row(
        "scipy.linalg.polar-qdwh",
        ksl.polar,
        np_polar("right"),
        [((4, 4),), ((2, 4, 3),)],
        differentiable=False,
    ),
    _row(
        "scipy.linalg.polar-svd-left",
        lambda a: ksl.polar(a, side="left", method="svd"),
        np_polar("left"),
        [((3, 3),), ((2, 3, 4),)],
    ),
]

for _left, _transpose in ((True, False), (True, True), (False, False), (False, True)):
    _c_shape = (5, 2) if _left else (2, 5)
    MORE_ROWS.append(
        _row(
            f"lax.linalg.ormqr-left={int(_left)}-transpose={int(_transpose)}",
            lambda a, t, c, p=(_left, _transpose): lax.linalg.ormqr(
                a, t, c, left=p[0], transpose=p[1]
            ),
            np_ormqr(_left, _transpose),
            [((5, 3), (3,), _c_shape), ((2, 5, 3), (2, 2), (2,) + _c_shape)],
            ("normal", reflector_scales, "normal"),
            dtypes=DTYPES,
            differentiable=False,
        )
    )


def np_expm(a):
    return _per_matrix(lambda m: scipy.linalg.expm(m), wide(a))


def np_block_diag(*arrays):
    return scipy.linalg.block_diag(*[wide(a) for a in arrays])


MORE_ROWS += [
    _row("scipy.linalg.expm", ksl.expm, np_expm, [((4, 4),), ((2, 3, 3),)], dtypes=DTYPES),
    _row(
        "scipy.linalg.block_diag",
        ksl.block_diag,
        np_block_diag,
        [((2, 2), (3,), (1, 2)), ((3, 1), (2, 2))],
        dtypes=DTYPES,
    ),
]
