"""Op-record rows of kiln.scipy.special and kiln.scipy.stats, against scipy.special and
scipy.stats in float64.

Shape parameters in which JAX does not differentiate (the `a` of gammainc, the `a`/`b` of
betainc, the `s` of zeta, integer counts) are held fixed in the differentiable rows: either
as integer arguments or as constants closed over by the row's function. Rows that take them
as float arguments check values only.
"""

import numpy as np
import scipy.special as ss
import scipy.stats as st

import kiln.scipy.special as ks
from kiln.scipy import stats as kst
from tests._testing import OpRecord

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
I32 = np.dtype(np.int32)
TOL = {F32: 2e-4, F64: 1e-9}
UNARY = [((5,),), ((3, 4),), ((),)]
BINARY = [((5,), (5,)), ((3, 4), ()), ((), (2, 3))]
TERNARY = [((5,), (5,), (5,)), ((3, 4), (), ())]


def _f64(fn):
    """A reference that computes in float64 and returns float64."""

    def ref(*args):
        with np.errstate(all="ignore"):
            return np.asarray(fn(*(np.asarray(a, np.float64) for a in args)), np.float64)

    return ref


def _uniform(low, high):
    def draw(shape, dtype, rng):
        return rng.uniform(low, high, shape).astype(dtype)

    return draw


def _ints(low, high):
    def draw(shape, dtype, rng):
        return rng.integers(low, high, shape).astype(dtype)

    return draw


PROB = _uniform(0.05, 0.95)
SHAPE_PARAM = _uniform(0.6, 4.0)


def _row(name, fn, ref, shapes, kind, differentiable, arg_dtypes=None):
    record = OpRecord(
        name,
        fn,
        _f64(ref),
        shapes,
        [F32],
        kind=kind,
        tol=TOL,
        out_dtype=lambda d: d,
        arg_dtypes=arg_dtypes,
    )
    record.family = "scipy"
    record.differentiable = differentiable
    return record


SPECIAL_RECORDS = [
    _row("special.gammaln", ks.gammaln, ss.gammaln, UNARY, "positive", True),
    _row("special.digamma", ks.digamma, ss.digamma, UNARY, "positive", True),
    _row("special.betaln", ks.betaln, ss.betaln, BINARY, "positive", True),
    _row("special.erf", ks.erf, ss.erf, UNARY, "normal", True),
    _row("special.erfc", ks.erfc, ss.erfc, UNARY, "normal", True),
    _row("special.erfinv", ks.erfinv, ss.erfinv, UNARY, "unit", True),
    _row("special.expit", ks.expit, ss.expit, UNARY, "normal", True),
    _row("special.logit", ks.logit, ss.logit, UNARY, PROB, True),
    _row("special.xlogy", ks.xlogy, ss.xlogy, BINARY, ("normal", "positive"), True),
    _row("special.xlog1py", ks.xlog1py, ss.xlog1py, BINARY, ("normal", "positive"), True),
    _row("special.entr", ks.entr, ss.entr, UNARY, "positive", True),
    _row("special.i0e", ks.i0e, ss.i0e, UNARY, "normal", True),
    _row("special.i1e", ks.i1e, ss.i1e, UNARY, "normal", True),
    _row("special.ndtr", ks.ndtr, ss.ndtr, UNARY, "normal", True),
    _row("special.ndtri", ks.ndtri, ss.ndtri, UNARY, PROB, True),
    _row("special.log_ndtr", ks.log_ndtr, ss.log_ndtr, UNARY, "normal", True),
    _row(
        "special.log_ndtr_tails",
        ks.log_ndtr,
        ss.log_ndtr,
        UNARY,
        _uniform(-40.0, 12.0),
        False,
    ),
    _row("special.gammainc", ks.gammainc, ss.gammainc, BINARY, "positive", False),
    _row("special.gammaincc", ks.gammaincc, ss.gammaincc, BINARY, "positive", False),
    _row(
        "special.gammainc_x",
        lambda x: ks.gammainc(2.5, x),
        lambda x: ss.gammainc(2.5, x),
        UNARY,
        "positive",
        True,
    ),
    _row(
        "special.gammaincc_x",
        lambda x: ks.gammaincc(1.5, x),
        lambda x: ss.gammaincc(1.5, x),
        UNARY,
        "positive",
        True,
    ),
    _row(
        "special.betainc",
        ks.betainc,
        ss.betainc,
        TERNARY,
        (SHAPE_PARAM, SHAPE_PARAM, PROB),
        False,
    ),
    _row(
        "special.betainc_x",
        lambda x: ks.betainc(2.0, 3.5, x),
        lambda x: ss.betainc(2.0, 3.5, x),
        UNARY,
        PROB,
        True,
    ),
    _row("special.zeta", ks.zeta, ss.zeta, BINARY, (_uniform(1.5, 5.0), "positive"), False),
    _row(
        "special.zeta_q",
        lambda q: ks.zeta(3.0, q),
        lambda q: ss.zeta(3.0, q),
        UNARY,
        "positive",
        True,
    ),
    _row(
        "special.polygamma",
        ks.polygamma,
        lambda n, x: ss.polygamma(n.astype(np.int64), x),
        BINARY,
        (_ints(0, 4), "positive"),
        True,
        arg_dtypes=lambda d: (I32, d),
    ),
]


def _dist_rows(module_name, functions, shapes, kind, ref_module, differentiable=True, **kw):
    module = getattr(kst, module_name)
    rows = []
    for fn_name in functions:
        ref = getattr(getattr(st, ref_module or module_name), fn_name)
        rows.append(
            _row(
                f"stats.{module_name}.{fn_name}",
                getattr(module, fn_name),
                ref,
                shapes,
                kind,
                differentiable,
                **kw,
            )
        )
    return rows


LOC_SCALE = ("normal", "normal", "positive")
STATS_RECORDS = (
    _dist_rows("norm", ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"), TERNARY, LOC_SCALE, None)
    + _dist_rows("norm", ("ppf",), TERNARY, (PROB, "normal", "positive"), None)
    + _dist_rows(
        "logistic", ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"), TERNARY, LOC_SCALE, None
    )
    + _dist_rows("logistic", ("ppf",), TERNARY, (PROB, "normal", "positive"), None)
    + _dist_rows(
        "cauchy", ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"), TERNARY, LOC_SCALE, None
    )
    + _dist_rows("cauchy", ("ppf",), TERNARY, (PROB, "normal", "positive"), None)
    + _dist_rows("laplace", ("logpdf", "pdf", "cdf"), TERNARY, LOC_SCALE, None)
    + _dist_rows(
        "expon",
        ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"),
        TERNARY,
        ("positive", _uniform(-2.0, 0.05), "positive"),
        None,
    )
    + _dist_rows("expon", ("ppf",), TERNARY, (PROB, "normal", "positive"), None)
    + _dist_rows(
        "uniform", ("logpdf", "pdf"), TERNARY, ("normal", "normal", "positive"), None, False
    )
    + _dist_rows(
        "uniform", ("cdf", "ppf"), TERNARY, (PROB, _uniform(-0.5, 0.0), _uniform(1.0, 2.0)), None
    )
    + _dist_rows(
        "gamma",
        ("logpdf", "pdf"),
        [((5,), (5,)), ((3, 4), ())],
        ("positive", SHAPE_PARAM),
        None,
    )
    + _dist_rows(
        "gamma",
        ("cdf", "sf", "logcdf", "logsf"),
        [((5,), (5,)), ((3, 4), ())],
        ("positive", SHAPE_PARAM),
        None,
        False,
    )
    + _dist_rows(
        "beta",
        ("logpdf", "pdf"),
        [((5,), (5,), (5,)), ((3, 4), (), ())],
        (PROB, SHAPE_PARAM, SHAPE_PARAM),
        None,
    )
    + _dist_rows(
        "beta",
        ("cdf", "sf", "logcdf", "logsf"),
        [((5,), (5,), (5,)), ((3, 4), (), ())],
        (PROB, SHAPE_PARAM, SHAPE_PARAM),
        None,
        False,
    )
    + _dist_rows(
        "t", ("logpdf", "pdf"), [((5,), (5,)), ((3, 4), ())], ("normal", SHAPE_PARAM), None
    )
    + _dist_rows(
        "poisson",
        ("logpmf", "pmf"),
        [((5,), (5,)), ((3, 4), ())],
        (_ints(0, 8), "positive"),
        None,
        arg_dtypes=lambda d: (I32, d),
    )
    + _dist_rows(
        "poisson",
        ("cdf",),
        [((5,), (5,)), ((3, 4), ())],
        (_ints(-1, 8), "positive"),
        None,
        False,
        arg_dtypes=lambda d: (I32, d),
    )
    + _dist_rows(
        "bernoulli",
        ("logpmf", "pmf"),
        [((5,), (5,)), ((3, 4), ())],
        (_ints(0, 2), PROB),
        None,
        arg_dtypes=lambda d: (I32, d),
    )
    + _dist_rows(
        "binom",
        ("logpmf", "pmf"),
        [((5,), (5,), (5,)), ((3, 4), (), ())],
        (_ints(0, 6), _ints(6, 10), PROB),
        None,
        arg_dtypes=lambda d: (I32, I32, d),
    )
)
_MVN_COV = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 1.5]])
STATS_RECORDS.append(
    _row(
        "stats.multivariate_normal.logpdf",
        lambda x, mean: kst.multivariate_normal.logpdf(x, mean, _MVN_COV.astype(x.dtype)),
        lambda x, mean: st.multivariate_normal.logpdf(x, mean, _MVN_COV),
        [((5, 3), (3,)), ((3,), (3,))],
        "normal",
        True,
    )
)

SCIPY_RECORDS = SPECIAL_RECORDS + STATS_RECORDS
