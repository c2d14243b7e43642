"""Log-gamma and digamma for kiln's inline vector math.

Both use polynomials on [1/2, 3) that carry the functions' zeros (x = 1, 2 for lgamma,
x0 = 1.4616... for digamma) as exact factors, the recurrence Gamma(x+1) = x Gamma(x) to reach that
range from below 8 (lgamma) or 10 (digamma), asymptotic series beyond, and the reflection
formulas for negative x. Coefficients are minimax fits computed for this module.
"""

from __future__ import annotations

from . import vmath_base as base
from .vmath_base import Emitter
from .vmath_exp_log import log_core, log_double_word
from .vmath_trig import sin_cos_of_reduced

# lgamma(x) = (x - zero) * P(x - centre) on [0.5, 1), [1, 1.5), [1.5, 2) and [2, 3).
_LG_A = {
    "float32": (
        -0.8131238222122192,
        1.0909483432769775,
        -0.7199661135673523,
        0.6552156209945679,
        -0.6729787588119507,
        0.7355040311813354,
        -0.8327896595001221,
        0.9378077983856201,
        -1.1071712970733643,
        1.77721107006073,
        -2.150630235671997,
    ),
    "float64": (
        -0.8131238057251815,
        1.0909482962451627,
        -0.7199661103625573,
        0.655224369441507,
        -0.6729879447120722,
        0.7347350816810392,
        -0.8319115773998883,
        0.9651524985130474,
        -1.1396030437498679,
        1.3637706077026106,
        -1.6495034932081112,
        2.0125331366288535,
        -2.4736573736628986,
        3.058772482332126,
        -3.792416188731521,
        4.735924012547645,
        -6.127711248576956,
        7.7111410254511,
        -7.476633300479678,
        9.459872240451517,
        -27.188817940839822,
        34.60134769259984,
    ),
}
_LG_B = {
    "float32": (
        -0.39308735728263855,
        0.6625352501869202,
        -0.25548386573791504,
        0.1367695927619934,
        -0.08329828828573227,
        0.05438792333006859,
        -0.03931611031293869,
        0.0268663689494133,
    ),
    "float64": (
        -0.3930873456872526,
        0.6625352492439489,
        -0.25548268796157486,
        0.13677079348841653,
        -0.08339250575517707,
        0.05439040174206499,
        -0.03692956436911779,
        0.02574385914843627,
        -0.018282075585575385,
        0.013163014669557615,
        -0.00957912635145173,
        0.007033266691451124,
        -0.005197736595792347,
        0.0038238323514662173,
        -0.002867810264931796,
        0.0025271409361213963,
        -0.0018637264905779403,
    ),
}
_LG_C = {
    "float32": (
        0.33760449290275574,
        0.3605281710624695,
        -0.08609142154455185,
        0.03022545762360096,
        -0.01246294379234314,
        0.0057512978091835976,
        -0.00279611605219543,
    ),
    "float64": (
        0.3376044840819422,
        0.36052812214032426,
        -0.08609125122636078,
        0.03022997882580873,
        -0.012471680011228371,
        0.005606724833463659,
        -0.0026545437241563123,
        0.0013001091216076738,
        -0.0006518929084121058,
        0.0003325119142760967,
        -0.00017181476959338,
        8.950580457467852e-05,
        -4.7006787335267956e-05,
        2.673102437430349e-05,
        -1.4651363971540633e-05,
    ),
}
_LG_D = {
    "float32": (
        0.5693657398223877,
        0.2675817906856537,
        -0.04480583593249321,
        0.01087710540741682,
        -0.0030953434761613607,
        0.0009596101008355618,
        -0.0003137297462671995,
        0.00011493503552628681,
        -4.1766772483242676e-05,
    ),
    "float64": (
        0.5693657409458384,
        0.2675817993988097,
        -0.044805842697384565,
        0.010877001514193217,
        -0.0030951822936200087,
        0.0009610979287978948,
        -0.00031505925026910705,
        0.00010710020391386553,
        -3.735337071058768e-05,
        1.3275793721419686e-05,
        -4.786368795578428e-06,
        1.7450160854572756e-06,
        -6.421946949242406e-07,
        2.3806736992400204e-07,
        -8.759315685656712e-08,
        3.255716410644789e-08,
        -1.471650863465578e-08,
        5.804079067813721e-09,
    ),
}
# lgamma(x) = (x - 1/2) log x - x + log(2 pi)/2 + S(1/x**2)/x for x >= 8.
_LG_S = {
    "float32": (
        0.0833333358168602,
        -0.0027776046190410852,
        0.0007755359401926398,
    ),
    "float64": (
        0.08333333333333331,
        -0.0027777777777503497,
        0.0007936507795855083,
        -0.0005952345851761578,
        0.0008412723296308404,
        -0.0018808019308286376,
        0.00488502596964105,
    ),
}
# digamma(x) = R(x - 0.75)/x on [0.5, 1), and (x - x0) * R(x - centre) on [1, 2) and [2, 3).
_PSI_P1 = {
    "float32": (
        -0.8143956661224365,
        0.8205488324165344,
        0.5533921718597412,
        -0.18090300261974335,
        0.08136646449565887,
        -0.04112391918897629,
        0.021971920505166054,
        -0.012631123885512352,
        0.006997416727244854,
    ),
    "float64": (
        -0.8143956598398542,
        0.8205488559672327,
        0.5533921915449916,
        -0.18090254131249703,
        0.08136649074330185,
        -0.04115018267578596,
        0.02197941656396447,
        -0.01207850142256525,
        0.006743280695557474,
        -0.0037992608820767285,
        0.0021522272223488898,
        -0.001223305608160396,
        0.000696661887270129,
        -0.0003959164842655746,
        0.00022610469511511125,
        -0.0001412596287136412,
        8.00024883261909e-05,
    ),
}
_PSI_E2 = {
    "float32": (
        0.9510558843612671,
        -0.42362740635871887,
        0.24054266512393951,
        -0.14840516448020935,
        0.09498073160648346,
        -0.0619141049683094,
        0.040894538164138794,
        -0.027089593932032585,
        0.016910744830965996,
        -0.011145303025841713,
        0.011230346746742725,
        -0.007625279016792774,
    ),
    "float64": (
        0.9510558760318328,
        -0.4236274212814606,
        0.24054248424078722,
        -0.14840492305388028,
        0.09498872445284978,
        -0.06192213327554278,
        0.04076083394339055,
        -0.026975796657622425,
        0.017907248235595773,
        -0.01190822015323033,
        0.007927023327012754,
        -0.005279936635206747,
        0.003518088710095431,
        -0.0023454998406577912,
        0.0015635033633436845,
        -0.0010364320026190813,
        0.0006902822950091363,
        -0.00048603465010485866,
        0.0003258803423600001,
        -0.00014465640314313138,
        9.329571884531961e-05,
        -0.00017833332993222924,
        0.00012117290648756803,
    ),
}
_PSI_E3 = {
    "float32": (
        0.6771748661994934,
        -0.1799142062664032,
        0.05952820926904678,
        -0.021390480920672417,
        0.00800976064056158,
        -0.0030618258751928806,
        0.0011898376978933811,
        -0.000512334518134594,
        0.00020372455765027553,
    ),
    "float64": (
        0.677174892537307,
        -0.17991421395780768,
        0.05952821809479122,
        -0.0213898923369668,
        0.00800942137273158,
        -0.003070214022302564,
        0.0011938447235161332,
        -0.00046848197342452206,
        0.0001849466865769443,
        -7.330734456737562e-05,
        2.9137104906786077e-05,
        -1.1609068879048886e-05,
        4.629457067225134e-06,
        -1.8214894473247696e-06,
        7.264849643462101e-07,
        -3.501222733855298e-07,
        1.4090095352413797e-07,
    ),
}
# digamma(x) = log x - 1/(2x) - u*T(u), u = 1/x**2, for x >= 6 (float32) or 10 (float64).
_PSI_T = {
    "float32": (
        0.0833333358168602,
        -0.008333329111337662,
        0.003967650700360537,
        -0.0041234465315938,
        0.006109138485044241,
    ),
    "float64": (
        0.08333333333333333,
        -0.008333333333332632,
        0.003968253967513485,
        -0.004166666281511621,
        0.007575645275886703,
        -0.02107345754583612,
        0.08136435626691224,
        -0.3310915080452964,
    ),
}

_HALF_LOG_2PI = "0.9189385332046727417803297364056176398614"
# The positive zero of digamma.
_DIGAMMA_ROOT = "1.461632144968362341262659542325721328468"
_DIGAMMA_ASYMPTOTIC = {"float32": 6.0, "float64": 10.0}


def _lgamma_pieces(em: Emitter):
    return (
        (0.5, 0.75, em.table(_LG_A)),
        (1.0, 1.25, em.table(_LG_B)),
        (1.5, 1.75, em.table(_LG_C)),
        (2.0, 2.5, em.table(_LG_D)),
    )


def _digamma_pieces(em: Emitter):
    return (
        (0.5, 0.75, em.table(_PSI_P1)),
        (1.0, 1.5, em.table(_PSI_E2)),
        (2.0, 2.5, em.table(_PSI_E3)),
    )


def _sin_cos_pi(em: Emitter, x):
    """(sin(pi r), cos(pi r), k odd) with x = k/2 + r, |r| <= 1/4; exact integers give r = 0."""
    # Beyond 2**mant_bits every float is an integer (and 2x could overflow): use r = 0, k = 0.
    x = em.select(em.lt(em.abs(x), em.c(2.0**em.mant_bits)), x, em.c(0.0))
    k = em.roundeven(em.add(x, x))
    r = em.fma(k, em.c(-0.5), x)
    pi_hi, pi_lo = base.split(base.PI, em.is_f64)
    sin_r, cos_r = sin_cos_of_reduced(em, em.fma(r, em.c(pi_hi), em.mul(r, em.c(pi_lo))))
    odd = em.b.trunc(em.to_int(k), em.bool_ty)
    return sin_r, cos_r, odd


def lgamma(em: Emitter, x):
    """log|Gamma(x)|, with SciPy's gammaln conventions (inf at poles, -inf at -inf)."""
    inf = float("inf")
    a = em.abs(x)
    small = em.lt(a, em.c(0.5))
    # |x| < 1/2: lgamma(x) = lgamma(1 + x) - log|x|; x <= -1/2 reflects to lgamma(|x|) below.
    v = em.select(small, em.add(em.c(1.0), x), a)
    # 3 <= x < 8: step down to [2, 3) with Gamma(z + 1) = z Gamma(z), collecting the product.
    z, product = v, em.c(1.0)
    for _ in range(5):
        taken = em.ge(z, em.c(3.0))
        z = em.select(taken, em.sub(z, em.c(1.0)), z)
        product = em.select(taken, em.mul(product, z), product)
    centre, coefficients = em.piecewise(z, _lgamma_pieces(em))
    zero = em.select(em.ge(z, em.c(1.5)), em.c(2.0), em.c(1.0))
    near = em.mul(em.sub(z, zero), em.horner(em.sub(z, centre), coefficients))
    big = em.ge(v, em.c(8.0))
    # One logarithm serves every path: of |x|, of the recurrence product, or of x for Stirling.
    log_hi, log_lo = log_double_word(em, em.select(small, a, em.select(big, v, product)))
    log_sum = em.add(log_hi, log_lo)
    near = em.add(near, em.select(small, em.neg(log_sum), log_sum))
    # Stirling: (x - 1/2)(log x - 1) - 1/2 + log(2 pi)/2 + S/x; never forming (x - 1/2) log x
    # itself keeps the intermediate finite wherever the result is.
    half_less = em.sub(v, em.c(0.5))
    log_less, log_less_err = em.fast_two_sum(log_hi, em.c(-1.0))
    p, p_err = em.two_prod(half_less, log_less)
    p_err = em.fma(half_less, em.add(log_less_err, log_lo), p_err)
    inverse = em.div(em.c(1.0), v)
    tail = em.mul(em.poly(em.mul(inverse, inverse), em.table(_LG_S)), inverse)
    constant = em.c(float(_HALF_LOG_2PI) - 0.5)
    far = em.add(p, em.add(p_err, em.add(constant, tail)))
    far = em.select(em.is_finite(p), far, p)
    positive = em.select(big, far, near)
    # x <= -1/2 reflects: lgamma(x) = log(pi / |x sin(pi x)|) - lgamma(|x|).
    sin_r, cos_r, odd = _sin_cos_pi(em, x)
    sin_pi_x = em.abs(em.select(odd, cos_r, sin_r))
    reflected = em.sub(log_core(em, em.div(em.c(float(base.PI)), em.mul(a, sin_pi_x))), positive)
    reflected = em.select(em.eq(sin_pi_x, em.c(0.0)), em.c(inf), reflected)
    result = em.select(em.land(em.lt(x, em.c(0.0)), em.lnot(small)), reflected, positive)
    result = em.select(em.eq(x, em.c(0.0)), em.c(inf), result)
    result = em.select(em.eq(a, em.c(inf)), x, result)
    return em.where_nan(x, result)


def digamma(em: Emitter, x):
    """The logarithmic derivative of Gamma, with SciPy's psi conventions (NaN at poles)."""
    negative = em.lt(x, em.c(0.0))
    # x < 0 reflects: digamma(x) = digamma(1 - x) - pi cot(pi x).
    v = em.select(negative, em.sub(em.c(1.0), x), x)
    small = em.lt(v, em.c(0.5))
    z = em.select(small, em.add(v, em.c(1.0)), v)
    total = em.select(small, em.div(em.c(-1.0), v), em.c(0.0))
    limit = _DIGAMMA_ASYMPTOTIC[em.dtype]
    # 3 <= x < limit: step down to [2, 3) with digamma(z + 1) = digamma(z) + 1/z.
    for _ in range(int(limit) - 3):
        taken = em.ge(z, em.c(3.0))
        z = em.select(taken, em.sub(z, em.c(1.0)), z)
        total = em.select(taken, em.add(total, em.div(em.c(1.0), z)), total)
    centre, coefficients = em.piecewise(z, _digamma_pieces(em))
    r = em.horner(em.sub(z, centre), coefficients)
    root_hi, root_lo = base.split(_DIGAMMA_ROOT, em.is_f64)
    from_root = em.sub(em.sub(z, em.c(root_hi)), em.c(root_lo))
    near = em.add(em.select(em.lt(z, em.c(1.0)), em.div(r, z), em.mul(r, from_root)), total)
    inverse = em.div(em.c(1.0), v)
    u = em.mul(inverse, inverse)
    series = em.fma(u, em.poly(u, em.table(_PSI_T)), em.mul(em.c(0.5), inverse))
    far = em.sub(log_core(em, v), series)
    positive = em.select(em.ge(v, em.c(limit)), far, near)
    sin_r, cos_r, odd = _sin_cos_pi(em, x)
    cot = em.div(em.select(odd, em.neg(sin_r), cos_r), em.select(odd, cos_r, sin_r))
    reflected = em.sub(positive, em.mul(em.c(float(base.PI)), cot))
    result = em.select(negative, reflected, positive)
    pole = em.land(negative, em.eq(em.roundeven(x), x))
    result = em.select(pole, em.c(float("nan")), result)
    result = em.select(em.eq(x, em.c(float("inf"))), x, result)
    return em.where_nan(x, result)
