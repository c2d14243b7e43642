"""The primitives behind kiln.random.

`threefry2x32` is the counter-based hash Threefry-2x32 (Salmon et al., "Parallel random
numbers: as easy as 1, 2, 3", SC 2011) with 20 rounds, as JAX's default PRNG uses it;
`threefry_2x32` hashes a flat array of counters with one key, pairing the first half of the
counters with the second half, which is the layout JAX's key splitting and bit generation use.

The samplers turn bits into floats with a few transcendental functions. kiln.lax's `log`,
`log1p`, `erf` and `erf_inv` are correctly rounded, but JAX on a CPU evaluates XLA's own
polynomials (Eigen's log, Cephes' log1p, Giles' erf_inv) and contracts multiplies feeding adds
into fused multiply-adds, so its samples differ from correctly rounded ones in the last bit
for a good share of draws. So that `kiln.random.normal(key)` gives JAX's numbers bit for bit,
this module carries those algorithms as the primitives `xla_log`, `xla_log1p`, `xla_erf`,
`xla_erf_inv` and `fma` (float16/bfloat16 are computed through float32 as XLA does; float64
follows XLA's float64 algorithms, which call the C library's log and erf). They were read off
the LLVM IR and machine code XLA emits on x86-64 with FMA; a JAX run on a CPU without FMA (or
on a GPU) draws slightly different floats.
"""

from __future__ import annotations

import math

import numpy as np

from kiln.config import config
from kiln.core import dtypes
from kiln.core.avals import ShapedArray
from kiln.core.primitive import Primitive
from kiln.primitives.base import (
    FLOAT,
    broadcast_scalar_shapes,
    defjvp,
    defjvp_zero,
    elementwise_batching,
    standard_binop,
    standard_unop,
)
from kiln.primitives.elementwise import (
    add,
    bitwise_and,
    bitwise_or,
    bitwise_xor,
    convert_element_type,
    div,
    mul,
    neg,
    shift_left,
    shift_right_logical,
)
from kiln.primitives.elementwise_math import exp, square
from kiln.primitives.shape import broadcast_in_dim, expand_dims, full, reshape
from kiln.primitives.shape_slice import broadcasted_iota, concatenate, iota, pad, slice as lax_slice

__all__ = [
    "threefry2x32",
    "threefry_2x32",
    "threefry2x32_p",
    "threefry_split",
    "threefry_fold_in",
    "threefry_random_bits",
    "fma",
    "xla_log",
    "xla_log1p",
    "xla_erf",
    "xla_erf_inv",
    "fma_p",
    "xla_log_p",
    "xla_log1p_p",
    "xla_erf_p",
    "xla_erf_inv_p",
]

# Rotation distances of the 2x32 variant: rounds alternate between the two groups of four.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
# The key schedule's parity constant, from the Threefish specification.
_KEY_PARITY = 0x1BD11BDA

_UINT32 = np.dtype(np.uint32)


def _rotate_left(x: np.ndarray, distance: int) -> np.ndarray:
    return (x << np.uint32(distance)) | (x >> np.uint32(32 - distance))


def _threefry2x32_numpy(
    k1: np.ndarray, k2: np.ndarray, x1: np.ndarray, x2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The hash in NumPy uint32 arithmetic (which wraps modulo 2**32, as the cipher needs)."""
    k1 = np.asarray(k1, _UINT32)
    k2 = np.asarray(k2, _UINT32)
    # Three key words: the two halves and their parity; each injection uses the next two.
    schedule = (k1, k2, k1 ^ k2 ^ np.uint32(_KEY_PARITY))
    # The additions make new arrays, so the caller's arrays are never written.
    v0 = np.asarray(x1, _UINT32) + schedule[0]
    v1 = np.asarray(x2, _UINT32) + schedule[1]
    v0, v1 = (np.array(v) for v in np.broadcast_arrays(v0, v1))
    for injection in range(1, 6):
        for distance in _ROTATIONS[(injection - 1) % 2]:
            v0 += v1
            v1 = _rotate_left(v1, distance)
            v1 ^= v0
        v0 += schedule[injection % 3]
        v1 += schedule[(injection + 1) % 3]
        v1 += np.uint32(injection)
    return v0, v1


# --- threefry2x32 ----------------------------------------------------------------------------
threefry2x32_p = Primitive("threefry2x32", multiple_results=True)


@threefry2x32_p.def_impl
def _threefry2x32_impl(
    k1: np.ndarray, k2: np.ndarray, x1: np.ndarray, x2: np.ndarray
) -> list[np.ndarray]:
    with np.errstate(over="ignore"):
        v0, v1 = _threefry2x32_numpy(k1, k2, x1, x2)
    return [v0, v1]


@threefry2x32_p.def_abstract_eval
def _threefry2x32_abstract_eval(
    k1: ShapedArray, k2: ShapedArray, x1: ShapedArray, x2: ShapedArray
) -> list[ShapedArray]:
    avals = (k1, k2, x1, x2)
    if any(a.dtype != _UINT32 for a in avals):
        raise TypeError(
            "Arguments to threefry2x32 must have uint32 type, got "
            f"{', '.join(a.dtype.name for a in avals)}."
        )
    shape = broadcast_scalar_shapes("threefry2x32", *avals)
    out = ShapedArray(shape, dtypes.uint32, False)
    return [out, out]


# Keys and counters are uint32, so they never carry tangents and the hash has none to give.
defjvp_zero(threefry2x32_p)
# The hash is elementwise in its four operands: a batch of keys or of counters (or both) is
# hashed in one call, and each element's words are exactly those of the unbatched call.
elementwise_batching(threefry2x32_p)


def threefry2x32(k1, k2, x1, x2):
    """Hash the uint32 word pairs (x1, x2) under the key (k1, k2); returns the two hashed
    words. Operands have equal shapes, except that rank-0 operands broadcast."""
    out1, out2 = threefry2x32_p.bind(k1, k2, x1, x2)
    return out1, out2


def threefry_2x32(keypair, count):
    """Hash every uint32 in `count` under `keypair` (a uint32[2] key), keeping count's shape.

    The flattened counters are padded to even length with one zero, the first half is hashed
    against the second half, and the two outputs are concatenated back (dropping the pad)."""
    for name, value in (("key", keypair), ("count", count)):
        if getattr(value, "dtype", None) != _UINT32:
            raise TypeError(
                f"threefry_2x32 requires uint32 arguments, got {name} of dtype "
                f"{getattr(value, 'dtype', type(value).__name__)}."
            )
    k1, k2 = _key_words(keypair)
    shape = tuple(count.shape)
    size = math.prod(shape)
    flat = reshape(count, (size,))
    odd = size % 2
    if odd:
        flat = pad(flat, np.uint32(0), [(0, 1, 0)])
    half = (size + odd) // 2
    x1 = lax_slice(flat, (0,), (half,))
    x2 = lax_slice(flat, (half,), (2 * half,))
    y1, y2 = threefry2x32(k1, k2, x1, x2)
    out = concatenate([y1, y2], 0)
    if odd:
        out = lax_slice(out, (0,), (size,))
    return reshape(out, shape)


def _key_words(key):
    """The two uint32 scalars of a single uint32[2] key."""
    return (reshape(lax_slice(key, (0,), (1,)), ()), reshape(lax_slice(key, (1,), (2,)), ()))


# --- JAX's counter schemes ----------------------------------------------------------------------
# How keys and bits come out of the hash depends on the `jax_threefry_partitionable` flag. Off
# (the older layout): the counters 0..n-1 are hashed as one flat array by `threefry_2x32`. On:
# each output position hashes its own 64-bit index (high word, low word), so any slice of the
# result can be computed independently.


def _iota_2x32(shape: tuple):
    """The row-major index of every position of `shape` as (high, low) uint32 words."""
    size = math.prod(shape)
    if size > 2**32:
        raise NotImplementedError("kiln.random draws at most 2**32 values per call.")
    low = reshape(iota(_UINT32, size), shape)
    return full(shape, 0, _UINT32), low


def threefry_split(key, shape: tuple):
    """uint32[*shape, 2]: new keys derived from the uint32[2] `key`."""
    if config.threefry_partitionable:
        k1, k2 = _key_words(key)
        high, low = _iota_2x32(shape)
        bits1, bits2 = threefry2x32(k1, k2, high, low)
        return concatenate(
            [expand_dims(bits1, (len(shape),)), expand_dims(bits2, (len(shape),))], len(shape)
        )
    counts = iota(_UINT32, math.prod(shape) * 2)
    return reshape(threefry_2x32(key, counts), (*shape, 2))


def threefry_fold_in(key, data):
    """A new uint32[2] key from `key` and a uint32 scalar: the hash of the words [0, data]
    (the key JAX's seeding makes from `data`)."""
    counts = concatenate([full((1,), 0, _UINT32), reshape(data, (1,))], 0)
    return threefry_2x32(key, counts)


_UINT_DTYPES = {
    8: np.dtype(np.uint8),
    16: np.dtype(np.uint16),
    32: _UINT32,
    64: np.dtype(np.uint64),
}


def threefry_random_bits(key, bit_width: int, shape: tuple):
    """Uniform unsigned integers of `bit_width` (8, 16, 32 or 64) bits and `shape`."""
    dtype = _UINT_DTYPES[bit_width]
    if config.threefry_partitionable:
        k1, k2 = _key_words(key)
        high, low = _iota_2x32(shape)
        bits1, bits2 = threefry2x32(k1, k2, high, low)
        if bit_width == 64:
            wide = [convert_element_type(b, dtype) for b in (bits1, bits2)]
            return bitwise_or(shift_left(wide[0], 32), wide[1])
        mixed = bitwise_xor(bits1, bits2)
        return mixed if bit_width == 32 else convert_element_type(mixed, dtype)
    size = math.prod(shape)
    count = -(-bit_width * size // 32)
    if count >= 2**32 - 1:
        raise NotImplementedError("kiln.random draws fewer than 2**32 words per call.")
    words = threefry_2x32(key, iota(_UINT32, count))
    if bit_width == 64:
        # The first half of the words are the high halves, the second half the low ones.
        half = count // 2
        high = convert_element_type(lax_slice(words, (0,), (half,)), dtype)
        low = convert_element_type(lax_slice(words, (half,), (count,)), dtype)
        words = bitwise_or(shift_left(high, 32), low)
    elif bit_width in (8, 16):
        # Each 32-bit word gives 32 // bit_width values, least significant part first (the
        # little-endian view of the words as narrower integers).
        per_word = 32 // bit_width
        shifts = mul(broadcasted_iota(_UINT32, (count, per_word), 1), bit_width)
        spread = broadcast_in_dim(words, (count, per_word), (0,))
        parts = bitwise_and(shift_right_logical(spread, shifts), (1 << bit_width) - 1)
        parts = reshape(parts, (count * per_word,))
        words = convert_element_type(lax_slice(parts, (0,), (size,)), dtype)
    return reshape(words, shape)


# --- float32 arithmetic as XLA:CPU performs it ------------------------------------------------
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_SMALL_FLOATS = (dtypes.float16, dtypes.bfloat16)


def _f32(bits: int) -> np.float32:
    """A float32 constant given by its bit pattern (how XLA's polynomials are written)."""
    return np.array(bits, np.uint32).view(np.float32)[()]


def _fma32(a, b, c) -> np.ndarray:
    """a * b + c rounded once to float32, like a hardware fused multiply-add.

    The product of two float32 values is exact in float64, so only the float64 sum rounds.
    Rounding that sum again to float32 is correct unless it landed exactly halfway between
    two float32 values while the exact sum was not there; those few are moved one float64
    step towards the exact sum (its error, from TwoSum) before the final rounding."""
    product = np.asarray(a).astype(_F64) * np.asarray(b).astype(_F64)
    c = np.asarray(c).astype(_F64)
    total = product + c
    # Halfway between float32 neighbours: the 29 mantissa bits float32 drops are 100...0.
    halfway = (total.view(np.int64) & 0x1FFFFFFF) == 0x10000000
    if halfway.any():
        product, c = np.broadcast_arrays(product, c)
        p, q, t = product[halfway], c[halfway], total[halfway]
        back = t - p
        error = (p - (t - back)) + (q - back)
        total = np.array(total)
        total[halfway] = np.where(
            error == 0, t, np.nextafter(t, np.where(error > 0, np.inf, -np.inf))
        )
    return total.astype(_F32)


def _fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c in float64 with the product's rounding error kept (Dekker's exact product),
    so the result is the correctly rounded one except in rare double-rounding cases."""
    split = 134217729.0  # 2**27 + 1: Veltkamp's constant for 53-bit significands

    def halves(x):
        t = split * x
        hi = t - (t - x)
        return hi, x - hi

    product = a * b
    a_hi, a_lo = halves(a)
    b_hi, b_lo = halves(b)
    product_error = ((a_hi * b_hi - product) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    total = product + c
    back = total - product
    sum_error = (product - (total - back)) + (c - back)
    out = total + (sum_error + product_error)
    # Infinite or huge operands make the error terms nan; the plain result is right there.
    return np.where(np.isfinite(out), out, a * b + c)


def _fma_impl(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if a.dtype == _F64:
            return _fma64(a, b, c)
        return _fma32(a, b, c).astype(a.dtype)


def _flush_denormals(x: np.ndarray) -> np.ndarray:
    # XLA:CPU runs with denormals-are-zero: a subnormal input behaves as a (signed) zero.
    tiny = np.finfo(np.float32).tiny
    return np.where(np.abs(x) < tiny, x * np.float32(0), x)


def _log_f32(y: np.ndarray) -> np.ndarray:
    """XLA:CPU's float32 log (Eigen's plog): split y into 2**e * f with f in [sqrt(1/2),
    sqrt(2)), evaluate a degree-9 polynomial in f - 1, add e * log(2) in two parts."""
    y = _flush_denormals(y)
    clamped = np.where(y > _f32(0x00800000), y, _f32(0x00800000))
    bits = clamped.view(np.uint32)
    exponent = ((bits >> np.uint32(23)).astype(np.int32) - 127).astype(_F32) + np.float32(1)
    mantissa = ((bits & np.uint32(0x807FFFFF)) | np.uint32(0x3F000000)).view(_F32)
    below = mantissa < _f32(0x3F3504F3)  # sqrt(1/2)
    z = (mantissa - np.float32(1)) + np.where(below, mantissa, np.float32(0))
    exponent = exponent - np.where(below, np.float32(1), np.float32(0))
    z2 = z * z
    z3 = z2 * z
    p1 = _fma32(_fma32(z, _f32(0x3D9021BB), _f32(0xBDEBD1B8)), z, _f32(0x3DEF251A))
    p2 = _fma32(_fma32(z, _f32(0xBDFE5D4F), _f32(0x3E11E9BF)), z, _f32(0xBE2AAE50))
    p3 = _fma32(_fma32(z, _f32(0x3E4CCEAC), _f32(0xBE7FFFFC)), z, _f32(0x3EAAAAAA))
    poly = _fma32(_fma32(p1, z3, p2), z3, p3)
    poly = _fma32(poly, z3, exponent * _f32(0xB95E8083))
    out = _fma32(exponent, _f32(0x3F318000), _fma32(z2, np.float32(-0.5), z) + poly)
    out = np.where(y == 0, np.float32(-np.inf), out)
    out = np.where(y == np.inf, np.float32(np.inf), out)
    return np.where(y >= 0, out, np.float32(np.nan)).astype(_F32)  # negative or nan -> nan


# Cephes' rational approximation of log1p on |x| < sqrt(2) - 1, as XLA evaluates it.
_LOG1P_DENOMINATOR = (0x417101AD, 0x42A6185B, 0x435DC32D, 0x439A8CA3, 0x43586D8A, 0x42707982)
_LOG1P_NUMERATOR = (0x3EFF40C5, 0x40D284FA, 0x41EF4B9C, 0x4273CC76, 0x426473AD, 0x41A05101)


def _log1p_f32(x: np.ndarray) -> np.ndarray:
    x = _flush_denormals(x)
    large = _log_f32(x + np.float32(1))
    x2 = x * x
    zero = x * np.float32(0)  # keeps inf/nan flowing as XLA's Horner start does
    denominator = zero + np.float32(1)
    for c in _LOG1P_DENOMINATOR:
        denominator = _fma32(denominator, x, _f32(c))
    numerator = zero + np.float32(4.527e-05)
    for c in _LOG1P_NUMERATOR:
        numerator = _fma32(numerator, x, _f32(c))
    small = x + _fma32(x2, np.float32(-0.5), (x * x2) * (numerator / denominator))
    return np.where(np.abs(x) < _f32(0x3ED413CD), small, large).astype(_F32)


# Giles' single-precision erf_inv ("Approximating the erfinv function", GPU Computing Gems):
# one polynomial in w - 2.5 for w = -log(1 - x*x) < 5, another in sqrt(w) - 3 beyond.
_ERF_INV_CENTRAL = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
_ERF_INV_TAIL = (
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
)


def _erf_inv_f32(x: np.ndarray) -> np.ndarray:
    w = -_log1p_f32(x * -x)
    central = w < np.float32(5)
    t = np.where(central, w + np.float32(-2.5), np.sqrt(w) + np.float32(-3)).astype(_F32)
    poly = np.where(central, np.float32(_ERF_INV_CENTRAL[0]), np.float32(_ERF_INV_TAIL[0]))
    for c_central, c_tail in zip(_ERF_INV_CENTRAL[1:], _ERF_INV_TAIL[1:]):
        poly = _fma32(poly, t, np.where(central, np.float32(c_central), np.float32(c_tail)))
    return np.where(np.abs(x) == 1, x * np.float32(np.inf), poly * x).astype(_F32)


# XLA's float32 erf: x * P(x^2) / Q(x^2), saturating to +-1 beyond |x| >= 3.832.
_ERF_NUMERATOR = (0x39702D51, 0x3B5F5DA2, 0x3D50B6EB, 0x3E3DA740, 0x3F906EBA)
_ERF_DENOMINATOR = (
    0xB3FD3906,
    0x37C588DF,
    0x3A856D28,
    0x3C6687D4,
    0x3DE34C21,
    0x3EFEB44A,
    0x3F800000,
)


def _erf_f32(x: np.ndarray) -> np.ndarray:
    x2 = x * x
    numerator = np.full_like(x, _f32(_ERF_NUMERATOR[0]))
    for c in _ERF_NUMERATOR[1:]:
        numerator = _fma32(x2, numerator, _f32(c))
    denominator = np.full_like(x, _f32(_ERF_DENOMINATOR[0]))
    for c in _ERF_DENOMINATOR[1:]:
        denominator = _fma32(x2, denominator, _f32(c))
    ratio = (x * numerator) / denominator
    return np.where(np.abs(x) >= _f32(0x407547CB), np.copysign(np.float32(1), x), ratio).astype(
        _F32
    )


# --- float64 ----------------------------------------------------------------------------------
# XLA:CPU computes float64 log and erf with the C library (glibc), whose results differ from
# NumPy's vectorized log in the last bit now and then; log1p and erf_inv are XLA's own
# polynomials around that log, evaluated with fused multiply-adds.
_math_log = np.frompyfunc(math.log, 1, 1)
_math_erf = np.frompyfunc(math.erf, 1, 1)


def _f64(bits: int) -> np.float64:
    return np.array(bits, np.uint64).view(np.float64)[()]


def _log_f64(x: np.ndarray) -> np.ndarray:
    out = np.array(np.log(x))  # right for 0, negatives, inf and nan (math.log raises)
    positive = np.isfinite(x) & (x > 0)
    out[positive] = _math_log(x[positive]).astype(_F64)
    return out


_LOG1P_DENOMINATOR_F64 = (
    0x402E20359E903E37,
    0x4054C30B52213498,
    0x406BB86590FCFB56,
    0x407351945DC908A5,
    0x406B0DB13E48E066,
    0x404E0F304466448E,
)
_LOG1P_NUMERATOR_F64 = (
    0x3FDFE818A0FE1A83,
    0x401A509F46F4FA53,
    0x403DE9738B8CB9C9,
    0x404E798EB86C3351,
    0x404C8E7597479A10,
    0x40340A202D99830A,
)


def _log1p_f64(x: np.ndarray) -> np.ndarray:
    large = _log_f64(x + 1.0)
    x2 = x * x
    zero = x * 0.0
    denominator = zero + 1.0
    for c in _LOG1P_DENOMINATOR_F64:
        denominator = _fma64(denominator, x, _f64(c))
    numerator = zero + _f64(0x3F07BC0962B395CA)
    for c in _LOG1P_NUMERATOR_F64:
        numerator = _fma64(numerator, x, _f64(c))
    small = x + _fma64(x2, np.float64(-0.5), (x * x2) * (numerator / denominator))
    return np.where(np.abs(x) < _f64(0x3FDA827999FCEF32), small, large)


# Giles' double-precision erf_inv: polynomials in w - 3.125 (w < 6.25), sqrt(w) - 3.25
# (w < 16) and sqrt(w) - 5 beyond, for w = -log(1 - x*x).
_ERF_INV_F64 = (
    (
        -3.6444120640178196996e-21,
        -1.685059138182016589e-19,
        1.2858480715256400167e-18,
        1.115787767802518096e-17,
        -1.333171662854620906e-16,
        2.0972767875968561637e-17,
        6.6376381343583238325e-15,
        -4.0545662729752068639e-14,
        -8.1519341976054721522e-14,
        2.6335093153082322977e-12,
        -1.2975133253453532498e-11,
        -5.4154120542946279317e-11,
        1.051212273321532285e-09,
        -4.1126339803469836976e-09,
        -2.9070369957882005086e-08,
        4.2347877827932403518e-07,
        -1.3654692000834678645e-06,
        -1.3882523362786468719e-05,
        0.0001867342080340571352,
        -0.00074070253416626697512,
        -0.0060336708714301490533,
        0.24015818242558961693,
        1.6536545626831027356,
    ),
    (
        2.2137376921775787049e-09,
        9.0756561938885390979e-08,
        -2.7517406297064545428e-07,
        1.8239629214389227755e-08,
        1.5027403968909827627e-06,
        -4.013867526981545969e-06,
        2.9234449089955446044e-06,
        1.2475304481671778723e-05,
        -4.7318229009055733981e-05,
        6.8284851459573175448e-05,
        2.4031110387097893999e-05,
        -0.0003550375203628474796,
        0.00095328937973738049703,
        -0.0016882755560235047313,
        0.0024914420961078508066,
        -0.0037512085075692412107,
        0.005370914553590063617,
        1.0052589676941592334,
        3.0838856104922207635,
    ),
    (
        -2.7109920616438573243e-11,
        -2.5556418169965252055e-10,
        1.5076572693500548083e-09,
        -3.7894654401267369937e-09,
        7.6157012080783393804e-09,
        -1.4960026627149240478e-08,
        2.9147953450901080826e-08,
        -6.7711997758452339498e-08,
        2.2900482228026654717e-07,
        -9.9298272942317002539e-07,
        4.5260625972231537039e-06,
        -1.9681778105531670567e-05,
        7.5995277030017761139e-05,
        -0.00021503011930044477347,
        -0.00013871931833623122026,
        1.0103004648645343977,
        4.8499064014085844221,
    ),
)


def _horner64(coefficients, t: np.ndarray) -> np.ndarray:
    poly = np.full_like(t, coefficients[0])
    for c in coefficients[1:]:
        poly = _fma64(poly, t, np.float64(c))
    return poly


def _erf_inv_f64(x: np.ndarray) -> np.ndarray:
    w = -_log1p_f64(x * -x)
    root = np.sqrt(w)
    central, middle, tail = (
        _horner64(c, t) for c, t in zip(_ERF_INV_F64, (w - 3.125, root - 3.25, root - 5.0))
    )
    poly = np.where(w < 6.25, central, np.where(w < 16, middle, tail))
    return np.where(np.abs(x) == 1, x * np.inf, poly * x)


def _erf_f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(_math_erf(x), dtype=_F64)


def _xla_unary(f32_impl, f64_impl):
    """An impl: float32 and float64 by XLA:CPU's algorithms, float16/bfloat16 through
    float32."""

    def impl(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            if x.dtype == _F64:
                return np.asarray(f64_impl(np.asarray(x, _F64)), _F64)
            out = f32_impl(np.asarray(x, _F32))
            return out.astype(x.dtype) if x.dtype != _F32 else out

    impl.__name__ = f32_impl.__name__
    return impl


fma_p = standard_binop("fma", _fma_impl, FLOAT, nargs=3)
xla_log_p = standard_unop("xla_log", _xla_unary(_log_f32, _log_f64), FLOAT)
xla_log1p_p = standard_unop("xla_log1p", _xla_unary(_log1p_f32, _log1p_f64), FLOAT)
xla_erf_p = standard_unop("xla_erf", _xla_unary(_erf_f32, _erf_f64), FLOAT)
xla_erf_inv_p = standard_unop("xla_erf_inv", _xla_unary(_erf_inv_f32, _erf_inv_f64), FLOAT)


# --- derivatives and batching of the float functions -------------------------------------------
# The samplers are differentiable in their parameters (a location, a scale, bounds) through
# these functions, so they have the derivatives of the exact functions they approximate.
# The tangents are computed with kiln's ordinary ops: only the primal values need XLA's bits.
_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
_SQRT_PI_OVER_TWO = math.sqrt(math.pi) / 2

defjvp(fma_p, lambda g, a, b, c: mul(g, b), lambda g, a, b, c: mul(a, g), lambda g, a, b, c: g)
defjvp(xla_log_p, lambda g, x: div(g, x))
defjvp(xla_log1p_p, lambda g, x: div(g, add(x, 1)))
defjvp(xla_erf_p, lambda g, x: mul(mul(g, exp(neg(square(x)))), _TWO_OVER_SQRT_PI))


@xla_erf_inv_p.def_jvp
def _xla_erf_inv_jvp_rule(primals, tangents):
    # d/dx erfinv(x) = sqrt(pi)/2 * exp(erfinv(x)**2): the output itself gives the slope.
    (x,), (g,) = primals, tangents
    out = xla_erf_inv_p.bind(x)
    return out, mul(mul(g, exp(square(out))), _SQRT_PI_OVER_TWO)


elementwise_batching(fma_p)
elementwise_batching(xla_log_p)
elementwise_batching(xla_log1p_p)
elementwise_batching(xla_erf_p)
elementwise_batching(xla_erf_inv_p)


def fma(a, b, c):
    """a * b + c with one rounding (what XLA:CPU emits for a multiply feeding an add)."""
    return fma_p.bind(a, b, c)


def xla_log(x):
    """The natural logarithm as JAX computes it on a CPU (float32: Eigen's polynomial)."""
    return xla_log_p.bind(x)


def xla_log1p(x):
    """log(1 + x) as JAX computes it on a CPU."""
    return xla_log1p_p.bind(x)


def xla_erf(x):
    """The error function as JAX computes it on a CPU."""
    return xla_erf_p.bind(x)


def xla_erf_inv(x):
    """The inverse error function as JAX computes it on a CPU (float32: Giles' polynomials)."""
    return xla_erf_inv_p.bind(x)
