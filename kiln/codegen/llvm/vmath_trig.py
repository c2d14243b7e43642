"""Circular functions and their inverses for kiln's inline vector math.

sin/cos/tan reduce by pi/2 with a three-part Cody-Waite constant and pick the quadrant with
integer bit tricks; arguments too large for that (it runs out of bits) take a Payne-Hanek
reduction, exact for every finite float, in a separate per-lane function that the fast path
branches to only when some lane needs it. The inverse functions reduce to small arguments by
identities. Polynomials are minimax fits (relative error) computed for this module.
"""

from __future__ import annotations

from llvmlite import ir

from . import vmath_base as base
from .target import StringAttributes
from .vmath_base import Emitter

# sin(r) = r + r**3 * S(r**2) and cos(r) = 1 - r**2/2 + r**4 * C(r**2) on |r| <= pi/4 plus a
# margin for the rounding of x * 2/pi (0.8 for float32, 0.7865 for float64).
_SIN_S = {
    "float32": (
        -0.16666653752326965,
        0.008332070894539356,
        -0.00019503016665112227,
    ),
    "float64": (
        -0.16666666666666666,
        0.008333333333333323,
        -0.00019841269841254597,
        2.7557319213958085e-06,
        -2.5052104853634462e-08,
        1.605835951882119e-10,
        -7.578357050924222e-13,
    ),
}
_COS_C = {
    "float32": (
        0.04166664183139801,
        -0.0013887194218114018,
        2.441913602524437e-05,
    ),
    "float64": (
        0.041666666666666595,
        -0.001388888888887284,
        2.4801587288713204e-05,
        -2.755731413827165e-07,
        2.0875695133644436e-09,
        -1.1358234411798378e-11,
    ),
}
# atan(t) = t + t**3 * A(t**2) on |t| <= tan(pi/8).
_ATAN_A = {
    "float32": (
        -0.33333316445350647,
        0.19998471438884735,
        -0.142435222864151,
        0.10593727231025696,
        -0.06077990680932999,
    ),
    "float64": (
        -0.333333333333332,
        0.19999999999953205,
        -0.14285714280162118,
        0.11111110781922653,
        -0.09090897718313283,
        0.07692059589913261,
        -0.06663097711976596,
        0.058478481357920414,
        -0.05039139059867343,
        0.038060806770517076,
        -0.0179035506801635,
    ),
}
# asin(x) = x + x**3 * P(x**2) on |x| <= 1/2.
_ASIN_P = {
    "float32": (
        0.16666659712791443,
        0.07500503957271576,
        0.04451695457100868,
        0.03180772066116333,
        0.014438589103519917,
        0.03751647472381592,
    ),
    "float64": (
        0.1666666666666676,
        0.07499999999970797,
        0.04464285717461377,
        0.030381942707712602,
        0.022372214989204543,
        0.01735161199209075,
        0.01398082074506074,
        0.01139891097474367,
        0.010780258378630869,
        0.0037063912372128525,
        0.021707483510036426,
        -0.020999107677568293,
        0.032628648984731994,
    ),
}

_TAN_PI_8 = 0.41421356237309503
_TAN_3PI_8 = 2.414213562373095


# Below these magnitudes the Cody-Waite reduction is accurate (measured: its error stays under
# the ulp bounds); at and above them, lanes go through the Payne-Hanek reduction.
_LARGE = {"float32": 65536.0, "float64": 2.0**30}

# The bits of 2/pi after the binary point, 64 to a word, most significant first, behind one
# zero word so that a window may start up to 64 bits before the point. 19 words cover the
# window (192 bits, plus 64 for the shift) of the largest float64 exponent.
_TWO_OVER_PI_BITS = (
    0x0000000000000000,
    0xA2F9836E4E441529,
    0xFC2757D1F534DDC0,
    0xDB6295993C439041,
    0xFE5163ABDEBBC561,
    0xB7246E3A424DD2E0,
    0x06492EEA09D1921C,
    0xFE1DEB1CB129A73E,
    0xE88235F52EBB4484,
    0xE99C7026B45F7E41,
    0x3991D639835339F4,
    0x9C845F8BBDF9283B,
    0x1FF897FFDE05980F,
    0xEF2F118B5A0A6D1F,
    0x6D367ECF27CB09B7,
    0x4F463F669E5FEA2D,
    0x7527BAC7EBE5F17B,
    0x3D0739F78A5292EA,
    0x6BFB5FB11F8D5D08,
    0x56033046FC7B6BAB,
)
_I64 = ir.IntType(64)
_I128 = ir.IntType(128)


def _two_over_pi_table(module: ir.Module) -> ir.GlobalVariable:
    name = "kiln.vmath.two_over_pi_bits"
    table = module.globals.get(name)
    if table is None:
        ty = ir.ArrayType(_I64, len(_TWO_OVER_PI_BITS))
        table = ir.GlobalVariable(module, ty, name)
        table.initializer = ir.Constant(ty, list(_TWO_OVER_PI_BITS))
        table.global_constant = True
        table.linkage = "internal"
    return table


def _reduce_exact(em: Emitter, x):
    """(r, q) with x = q*pi/2 + r, |r| <= pi/4, for a scalar float64 x with 2**-10 <= |x| < inf.

    x = m * 2**e with m a 53-bit integer; x * 2/pi mod 4 only needs the bits of 2/pi from
    weight 2**(1 - e) on, so a 192-bit window W of them is multiplied by m in integers: the
    product's top two bits (mod 2**192) are the quadrant, the next 126 the fraction. The window
    starts at bit e - 2 of the table (the zero word first), read as three funnel-shifted words.
    """
    b = em.b
    bits = b.bitcast(em.abs(x), _I64)
    exponent = b.sub(b.lshr(bits, ir.Constant(_I64, 52)), ir.Constant(_I64, 1075))
    mantissa = b.or_(b.and_(bits, ir.Constant(_I64, (1 << 52) - 1)), ir.Constant(_I64, 1 << 52))
    start = b.add(exponent, ir.Constant(_I64, 62))
    word = b.lshr(start, ir.Constant(_I64, 6))
    shift = b.and_(start, ir.Constant(_I64, 63))
    table = _two_over_pi_table(b.module)
    zero = ir.Constant(ir.IntType(32), 0)
    raw = [
        b.load(b.gep(table, [zero, b.add(word, ir.Constant(_I64, k))], inbounds=True))
        for k in range(4)
    ]
    fshl = b.module.globals.get("llvm.fshl.i64") or ir.Function(
        b.module, ir.FunctionType(_I64, [_I64] * 3), "llvm.fshl.i64"
    )
    w0, w1, w2 = (b.call(fshl, [raw[k], raw[k + 1], shift]) for k in range(3))
    m = b.zext(mantissa, _I128)
    low = b.mul(m, b.zext(w2, _I128))
    # (m * W) mod 2**192, kept as its upper 128 bits (the lowest 64 only carry into them).
    upper = b.add(b.mul(m, b.zext(w1, _I128)), b.lshr(low, ir.Constant(_I128, 64)))
    upper = b.add(upper, b.shl(b.zext(b.mul(mantissa, w0), _I128), ir.Constant(_I128, 64)))
    # The fraction as a signed 126-bit number: reading it signed rounds the quadrant to nearest.
    fraction = b.shl(upper, ir.Constant(_I128, 2))
    negative_fraction = b.icmp_signed("<", fraction, ir.Constant(_I128, 0))
    quadrant = b.trunc(b.lshr(upper, ir.Constant(_I128, 126)), _I64)
    quadrant = b.add(quadrant, b.zext(negative_fraction, _I64))
    hi = b.trunc(b.ashr(fraction, ir.Constant(_I128, 64)), _I64)
    lo = b.trunc(fraction, _I64)
    # Three exactly convertible pieces (53, 53 and 22 bits) of the 128-bit fraction.
    top = b.ashr(hi, ir.Constant(_I64, 11))
    middle = b.or_(
        b.shl(b.and_(hi, ir.Constant(_I64, 0x7FF)), ir.Constant(_I64, 42)),
        b.lshr(lo, ir.Constant(_I64, 22)),
    )
    bottom = b.and_(lo, ir.Constant(_I64, (1 << 22) - 1))
    f_top = em.mul(b.sitofp(top, em.ty), em.c(2.0**-53))
    f_middle = em.mul(b.uitofp(middle, em.ty), em.c(2.0**-106))
    f_bottom = em.mul(b.uitofp(bottom, em.ty), em.c(2.0**-128))
    f_hi, f_lo = em.two_sum(f_top, f_middle)
    f_lo = em.add(f_lo, f_bottom)
    # r = f * pi/2 in double-word arithmetic, then rounded once.
    pi_2_hi, pi_2_lo = base.split(base.PI_2, True)
    r_hi, r_err = em.two_prod(f_hi, em.c(pi_2_hi))
    r_lo = em.fma(f_hi, em.c(pi_2_lo), em.fma(f_lo, em.c(pi_2_hi), r_err))
    r = em.add(r_hi, r_lo)
    # x < 0: x = -q*pi/2 - r.
    sign = em.sign_bit(x)
    r = em.select(sign, em.neg(r), r)
    quadrant = b.select(sign, b.neg(quadrant), quadrant)
    return r, b.and_(quadrant, ir.Constant(_I64, 3))


def _variant_lanes(em: Emitter) -> int:
    """The vector width the loop vectorizer picks for this float type on the current target
    (its widest registers: 512 bits with AVX-512, else 256). Only that width gets a masked
    variant: at other widths LLVM calls the scalar function lane by lane, which is correct,
    only slower, and every variant costs compile time."""
    from .target import current_target  # here, not at import: vmath is usable without one

    register_bits = 512 if current_target().has_avx512 else 256
    return register_bits // em.bits


def _large_function(em: Emitter, op: str, body) -> ir.Function:
    """The scalar function `op` of em's float type for |x| >= _LARGE: reduce exactly (in
    float64), then finish with body(em_scalar, x, r, q) as the fast path does.

    It stays out of line (noinline), so the fast path carries only a branch to it. A masked
    vector variant, declared to LLVM through "vector-function-abi-variant", lets the loop
    vectorizer widen a loop that calls it: the variant tests the mask and walks the set lanes.
    The variant is alwaysinline; target.optimize inlines it once the vectorizer has called it.
    """
    scalar = em.ty.element if em.lanes else em.ty
    name = f"kiln_vmath_{op}_large_{em.dtype}"
    module = em.b.module
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    lanes = _variant_lanes(em)
    variant_name = f"{name}_m{lanes}"
    fn = ir.Function(module, ir.FunctionType(scalar, [scalar]), name)
    fn.attributes = StringAttributes(
        {"vector-function-abi-variant": f"_ZGV_LLVM_M{lanes}v_{name}({variant_name})"}
    )
    fn.linkage = "internal"
    for attribute in ("noinline", "nounwind", "readnone"):
        fn.attributes.add(attribute)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    builder.ret(_large_scalar(builder, fn.args[0], body))

    vector = ir.VectorType(scalar, lanes)
    mask_type = ir.VectorType(ir.IntType(1), lanes)
    variant = ir.Function(module, ir.FunctionType(vector, [vector, mask_type]), variant_name)
    variant.linkage = "internal"
    for attribute in ("alwaysinline", "nounwind", "readnone"):
        variant.attributes.add(attribute)
    builder = ir.IRBuilder(variant.append_basic_block("entry"))
    x, mask = variant.args
    # The lanes' code is inline rather than a call of fn: a call clobbers every vector
    # register, and the loop the variant is inlined into would keep its constants on the stack.
    builder.ret(
        _patch_lanes(
            builder, lambda b, v: _large_scalar(b, v, body), x, mask, ir.Constant(vector, None)
        )
    )
    _keep(module, variant)
    return fn


def _large_scalar(b: ir.IRBuilder, x, body):
    """body's result for one scalar x with |x| >= _LARGE, reduced exactly in float64."""
    em = Emitter(b, x.type)
    wide = em.sibling(True)
    r, quadrant = _reduce_exact(wide, b.fpext(x, wide.ty) if not em.is_f64 else x)
    if not em.is_f64:
        r = b.fptrunc(r, em.ty)
        quadrant = b.trunc(quadrant, em.ity)
    return body(em, x, r, quadrant)


def _keep(module: ir.Module, function: ir.Function) -> None:
    """List function in llvm.compiler.used: nothing calls a vector variant until the loop
    vectorizer does, and without this the unused internal function is deleted before that."""
    kept = getattr(module, "_kiln_vmath_kept", [])
    kept.append(function)
    module._kiln_vmath_kept = kept
    name = "llvm.compiler.used"
    if name in module.globals:
        # llvmlite cannot redefine a global: drop the old list and its name, then build anew.
        del module.globals[name]
        module.scope._useset.discard(name)
    pointer = ir.PointerType()
    ty = ir.ArrayType(pointer, len(kept))
    used = ir.GlobalVariable(module, ty, name)
    used.linkage = "appending"
    used.section = "llvm.metadata"
    used.initializer = ir.Constant(
        ty, [f.bitcast(pointer) if f.type != pointer else f for f in kept]
    )


def _patch_lanes(b: ir.IRBuilder, lane, x, mask, fallback):
    """fallback with lane(b, x[i]) in the lanes i where mask is set.

    The whole mask is tested first; then only its set bits are visited (lowest first, by
    count-trailing-zeros), a loop of unknown trip count that LLVM leaves rolled up.
    """
    lanes = x.type.count
    origin = b.block
    function = b.function
    walk = function.append_basic_block("lanes")
    merge = function.append_basic_block("lanes.end")
    bits = b.zext(b.bitcast(mask, ir.IntType(lanes)), _I64)
    _rarely(b.cbranch(b.icmp_unsigned("!=", bits, ir.Constant(_I64, 0)), walk, merge))
    b.position_at_end(walk)
    pending = b.phi(_I64)
    acc = b.phi(x.type)
    pending.add_incoming(bits, origin)
    acc.add_incoming(fallback, origin)
    cttz = b.module.globals.get("llvm.cttz.i64") or ir.Function(
        b.module, ir.FunctionType(_I64, [_I64, ir.IntType(1)]), "llvm.cttz.i64"
    )
    index = b.trunc(b.call(cttz, [pending, ir.Constant(ir.IntType(1), 1)]), ir.IntType(32))
    patched = b.insert_element(acc, lane(b, b.extract_element(x, index)), index)
    rest = b.and_(pending, b.sub(pending, ir.Constant(_I64, 1)))
    pending.add_incoming(rest, b.block)
    acc.add_incoming(patched, b.block)
    b.cbranch(b.icmp_unsigned("!=", rest, ir.Constant(_I64, 0)), walk, merge)
    b.position_at_end(merge)
    result = b.phi(x.type)
    result.add_incoming(fallback, origin)
    result.add_incoming(patched, walk)
    return result


def _rarely(branch) -> None:
    """Mark a conditional branch as almost never taken, so the register allocator keeps the
    common path's values in registers and moves spills to the rare side."""
    module = branch.parent.parent.module
    i32 = ir.IntType(32)
    weights = module.add_metadata(
        [
            ir.MetaDataString(module, "branch_weights"),
            ir.Constant(i32, 1),
            ir.Constant(i32, 1 << 20),
        ]
    )
    branch.set_metadata("prof", weights)


def _with_large_path(em: Emitter, x, fast, op: str, body):
    """fast, except in lanes with _LARGE <= |x| < inf, which get the exact reduction.

    A scalar x branches around one call (which the loop vectorizer turns into a call of a
    masked variant); a vector x tests whether any lane is large and only then walks the lanes.
    Either way the common case costs a compare and a well-predicted branch.
    """
    b = em.b
    large = em.land(em.ge(em.abs(x), em.c(_LARGE[em.dtype])), em.is_finite(x))
    if em.lanes:
        return _patch_lanes(b, lambda b, v: _large_scalar(b, v, body), x, large, fast)
    fn = _large_function(em, op, body)
    origin = b.block
    slow = b.function.append_basic_block(f"{op}.large")
    merge = b.function.append_basic_block(f"{op}.large.end")
    _rarely(b.cbranch(large, slow, merge))
    b.position_at_end(slow)
    exact = b.call(fn, [x])
    b.branch(merge)
    b.position_at_end(merge)
    result = b.phi(em.ty)
    result.add_incoming(fast, origin)
    result.add_incoming(exact, slow)
    return result


def _reduce(em: Emitter, x):
    """(r, q): x = q*pi/2 + r with |r| <= pi/4 (q as an integer mod 4), for |x| < _LARGE."""
    finite = em.select(em.is_finite(x), x, em.c(0.0))
    # x * 2/pi with the constant in two parts, so only the product's rounding remains.
    two_over_pi_hi, two_over_pi_lo = base.split(base.TWO_OVER_PI, em.is_f64)
    j = em.roundeven(em.fma(finite, em.c(two_over_pi_hi), em.mul(finite, em.c(two_over_pi_lo))))
    r = finite
    for part in base.split3(base.PI_2, em.is_f64):
        r = em.fma(em.neg(j), em.c(part), r)
    # x * 2/pi is rounded, so r can pass pi/4 by a hair (below _LARGE: |r| < 0.7925 for
    # float32, < 0.78540 for float64), which the polynomials' fitting interval covers.
    quadrant = em.sub(j, em.mul(em.c(4.0), em.floor(em.mul(j, em.c(0.25)))))
    return r, em.to_int(quadrant)


def _sin_cos_parts(em: Emitter, r):
    """sin r = r + sin_tail and cos r = w + cos_tail, each tail small against its head."""
    z = em.mul(r, r)
    sin_tail = em.mul(em.mul(r, z), em.poly(z, em.table(_SIN_S)))
    half_z = em.mul(em.c(0.5), z)
    w = em.sub(em.c(1.0), half_z)
    # (1 - w) - z/2 recovers what rounding 1 - z/2 lost.
    cos_tail = em.fma(
        em.mul(z, z), em.poly(z, em.table(_COS_C)), em.sub(em.sub(em.c(1.0), w), half_z)
    )
    return sin_tail, w, cos_tail


def sin_cos_of_reduced(em: Emitter, r):
    """(sin r, cos r) for |r| <= pi/4 (plus the reduction margin)."""
    sin_tail, w, cos_tail = _sin_cos_parts(em, r)
    return em.add(r, sin_tail), em.add(w, cos_tail)


def _sin_or_cos_of_reduced(em: Emitter, r, q, quadrant_offset: int):
    q = em.b.add(q, em.ic(quadrant_offset))
    sin_r, cos_r = sin_cos_of_reduced(em, r)
    odd = em.b.icmp_unsigned("!=", em.b.and_(q, em.ic(1)), em.ic(0))
    value = em.select(odd, cos_r, sin_r)
    # Quadrants 2 and 3 negate: move bit 1 of q into the sign bit.
    sign = em.b.shl(em.b.and_(q, em.ic(2)), em.ic(em.bits - 2))
    return em.as_float(em.b.xor(em.as_int(value), sign))


def _tan_of_reduced(em: Emitter, r, q):
    """sin r / cos r, or -cos r / sin r in odd quadrants (tan(r + pi/2) = -cot r).

    Dividing the rounded sine by the rounded cosine would add up three roundings (2.5 ulps);
    instead the quotient is taken once through a reciprocal and corrected by its residual
    against the unrounded head + tail parts, which leaves about one rounding.
    """
    sin_tail, w, cos_tail = _sin_cos_parts(em, r)
    odd = em.b.icmp_unsigned("!=", em.b.and_(q, em.ic(1)), em.ic(0))
    num_head = em.select(odd, em.neg(w), r)
    num_tail = em.select(odd, em.neg(cos_tail), sin_tail)
    den_head = em.select(odd, r, w)
    den_tail = em.select(odd, sin_tail, cos_tail)
    denominator = em.add(den_head, den_tail)
    inverse = em.div(em.c(1.0), denominator)
    quotient = em.mul(em.add(num_head, num_tail), inverse)
    residual = em.add(
        em.fma(em.neg(quotient), den_head, num_head), em.fma(em.neg(quotient), den_tail, num_tail)
    )
    return em.fma(residual, inverse, quotient)


def _finish(em: Emitter, x, result):
    """NaN for ±inf, NaN inputs passed through."""
    result = em.select(em.is_inf(x), em.c(float("nan")), result)
    return em.where_nan(x, result)


def _sin_large(em, x, r, q):
    return _sin_or_cos_of_reduced(em, r, q, 0)


def _cos_large(em, x, r, q):
    return _sin_or_cos_of_reduced(em, r, q, 1)


def _tan_large(em, x, r, q):
    return _tan_of_reduced(em, r, q)


def sin(em: Emitter, x):
    r, q = _reduce(em, x)
    result = _with_large_path(em, x, _sin_or_cos_of_reduced(em, r, q, 0), "sin", _sin_large)
    return em.where_zero(x, _finish(em, x, result))


def cos(em: Emitter, x):
    r, q = _reduce(em, x)
    result = _with_large_path(em, x, _sin_or_cos_of_reduced(em, r, q, 1), "cos", _cos_large)
    return _finish(em, x, result)


def tan(em: Emitter, x):
    r, q = _reduce(em, x)
    result = _with_large_path(em, x, _tan_of_reduced(em, r, q), "tan", _tan_large)
    return em.where_zero(x, _finish(em, x, result))


def _atan_nonnegative(em: Emitter, t):
    """atan(t) for t >= 0 (inf included): reduce by pi/4 or pi/2 to |u| <= tan(pi/8)."""
    big = em.gt(t, em.c(_TAN_3PI_8))
    mid = em.gt(t, em.c(_TAN_PI_8))
    u = em.select(mid, em.div(em.sub(t, em.c(1.0)), em.add(t, em.c(1.0))), t)
    u = em.select(big, em.div(em.c(-1.0), t), u)
    pi_2 = base.split(base.PI_2, em.is_f64)
    pi_4 = base.split(base.PI_4, em.is_f64)
    offset_hi = em.select(big, em.c(pi_2[0]), em.select(mid, em.c(pi_4[0]), em.c(0.0)))
    offset_lo = em.select(big, em.c(pi_2[1]), em.select(mid, em.c(pi_4[1]), em.c(0.0)))
    z = em.mul(u, u)
    p = em.fma(em.mul(u, z), em.poly(z, em.table(_ATAN_A)), u)
    return em.add(offset_hi, em.add(offset_lo, p))


def atan(em: Emitter, x):
    return em.where_nan(x, em.copysign(_atan_nonnegative(em, em.abs(x)), x))


def _atan_of_ratio(em: Emitter, numerator, denominator):
    """atan(numerator / denominator) for 0 <= numerator <= denominator (0/0 counts as 0).

    Above tan(pi/8) the argument is u = (n - d)/(n + d) with the offset pi/4, formed from n and
    d directly: n - d is exact there, so u carries two roundings, not the four of going
    through t = n/d first.
    """
    # Scale both by a power of two (exact): down near the top of the range, so that n + d
    # cannot overflow, and up near the bottom, so that tan(pi/8) * d is not a rounded subnormal.
    huge = em.gt(denominator, em.c(2.0 ** (1021 if em.is_f64 else 125)))
    tiny = em.lt(denominator, em.c(2.0 ** (-960 if em.is_f64 else -100)))
    factor = em.select(huge, em.c(0.25), em.select(tiny, em.c(2.0**60), em.c(1.0)))
    numerator = em.mul(numerator, factor)
    denominator = em.mul(denominator, factor)
    mid = em.gt(numerator, em.mul(em.c(_TAN_PI_8), denominator))
    top = em.select(mid, em.sub(numerator, denominator), numerator)
    bottom = em.select(mid, em.add(numerator, denominator), denominator)
    u = em.div(top, bottom)
    u = em.select(em.eq(denominator, em.c(0.0)), em.c(0.0), u)
    pi_4 = base.split(base.PI_4, em.is_f64)
    z = em.mul(u, u)
    p = em.fma(em.mul(u, z), em.poly(z, em.table(_ATAN_A)), u)
    offset_hi = em.select(mid, em.c(pi_4[0]), em.c(0.0))
    offset_lo = em.select(mid, em.c(pi_4[1]), em.c(0.0))
    return em.add(offset_hi, em.add(offset_lo, p))


def atan2(em: Emitter, y, x):
    ay, ax = em.abs(y), em.abs(x)
    swap = em.gt(ay, ax)
    numerator = em.select(swap, ax, ay)
    denominator = em.select(swap, ay, ax)
    # Both infinite: the angle is the one of (1, 1); both zero: the ratio counts as 0.
    both_inf = em.land(em.is_inf(ax), em.is_inf(ay))
    numerator = em.select(both_inf, em.c(1.0), numerator)
    denominator = em.select(both_inf, em.c(1.0), denominator)
    angle = _atan_of_ratio(em, numerator, denominator)
    pi_2 = base.split(base.PI_2, em.is_f64)
    pi = base.split(base.PI, em.is_f64)
    angle = em.select(swap, em.add(em.sub(em.c(pi_2[0]), angle), em.c(pi_2[1])), angle)
    angle = em.select(em.sign_bit(x), em.add(em.sub(em.c(pi[0]), angle), em.c(pi[1])), angle)
    result = em.copysign(angle, y)
    return em.select(em.lor(em.is_nan(x), em.is_nan(y)), em.add(x, y), result)


def _asin_near_one(em: Emitter, a):
    """(h, l) with h + l = asin(sqrt((1 - a)/2)) for a in [1/2, 1], sqrt kept in two parts."""
    z = em.mul(em.sub(em.c(1.0), a), em.c(0.5))
    s = em.sqrt(z)
    s_lo = em.div(em.fma(em.neg(s), s, z), em.add(s, s))
    s_lo = em.select(em.eq(s, em.c(0.0)), em.c(0.0), s_lo)
    return s, em.fma(em.mul(s, z), em.poly(z, em.table(_ASIN_P)), s_lo)


def _odd_asin_poly(em: Emitter, x):
    z = em.mul(x, x)
    return em.fma(em.mul(x, z), em.poly(z, em.table(_ASIN_P)), x)


def asin(em: Emitter, x):
    a = em.abs(x)
    h, l = _asin_near_one(em, a)
    pi_2 = base.split(base.PI_2, em.is_f64)
    # asin(a) = pi/2 - 2 asin(sqrt((1 - a)/2)).
    large = em.add(em.sub(em.c(pi_2[0]), em.add(h, h)), em.sub(em.c(pi_2[1]), em.add(l, l)))
    result = em.select(em.lt(a, em.c(0.5)), _odd_asin_poly(em, a), large)
    result = em.select(em.gt(a, em.c(1.0)), em.c(float("nan")), result)
    return em.where_nan(x, em.copysign(result, x))


def acos(em: Emitter, x):
    a = em.abs(x)
    h, l = _asin_near_one(em, a)
    pi_2 = base.split(base.PI_2, em.is_f64)
    pi = base.split(base.PI, em.is_f64)
    small = em.sub(em.c(pi_2[0]), em.sub(_odd_asin_poly(em, x), em.c(pi_2[1])))
    twice = em.add(em.add(h, h), em.add(l, l))
    # acos(x) = 2 asin(sqrt((1 - x)/2)) for x >= 1/2, and pi minus that mirrored for x <= -1/2.
    large = em.select(em.lt(x, em.c(0.0)), em.sub(em.c(pi[0]), em.sub(twice, em.c(pi[1]))), twice)
    result = em.select(em.lt(a, em.c(0.5)), small, large)
    result = em.select(em.gt(a, em.c(1.0)), em.c(float("nan")), result)
    return em.where_nan(x, result)
