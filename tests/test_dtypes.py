"""dtypes: JAX's type-promotion lattice (the table from JAX's documentation, written out by
hand), weak types from Python scalars, the x64 flag, and kiln.numpy's scalar types and dtype
queries (dtype, issubdtype, isdtype, can_cast, promote_types, result_type)."""

import ml_dtypes
import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.core import dtypes
from tests._testing import x64_mode

BF16 = np.dtype(ml_dtypes.bfloat16)

# JAX's promotion table. Row and column labels: b1 bool, uN / iN unsigned / signed N-byte
# integers, bf bfloat16, f2/f4/f8 floats, c4/c8 complex64/complex128, and the weak types of
# Python scalars: i* (int), f* (float), c* (complex), which are int64/float64/complex128 with x64
# and int32/float32/complex64 without, and stay weak.
PROMOTION_TABLE = """
    b1 u1 u2 u4 u8 i1 i2 i4 i8 bf f2 f4 f8 c4 c8 i* f* c*
b1  b1 u1 u2 u4 u8 i1 i2 i4 i8 bf f2 f4 f8 c4 c8 i* f* c*
u1  u1 u1 u2 u4 u8 i2 i2 i4 i8 bf f2 f4 f8 c4 c8 u1 f* c*
u2  u2 u2 u2 u4 u8 i4 i4 i4 i8 bf f2 f4 f8 c4 c8 u2 f* c*
u4  u4 u4 u4 u4 u8 i8 i8 i8 i8 bf f2 f4 f8 c4 c8 u4 f* c*
u8  u8 u8 u8 u8 u8 f* f* f* f* bf f2 f4 f8 c4 c8 u8 f* c*
i1  i1 i2 i4 i8 f* i1 i2 i4 i8 bf f2 f4 f8 c4 c8 i1 f* c*
i2  i2 i2 i4 i8 f* i2 i2 i4 i8 bf f2 f4 f8 c4 c8 i2 f* c*
i4  i4 i4 i4 i8 f* i4 i4 i4 i8 bf f2 f4 f8 c4 c8 i4 f* c*
i8  i8 i8 i8 i8 f* i8 i8 i8 i8 bf f2 f4 f8 c4 c8 i8 f* c*
bf  bf bf bf bf bf bf bf bf bf bf f4 f4 f8 c4 c8 bf bf c4
f2  f2 f2 f2 f2 f2 f2 f2 f2 f2 f4 f2 f4 f8 c4 c8 f2 f2 c4
f4  f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f4 f8 c4 c8 f4 f4 c4
f8  f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 f8 c8 c8 f8 f8 c8
c4  c4 c4 c4 c4 c4 c4 c4 c4 c4 c4 c4 c4 c8 c4 c8 c4 c4 c4
c8  c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8 c8
i*  i* u1 u2 u4 u8 i1 i2 i4 i8 bf f2 f4 f8 c4 c8 i* f* c*
f*  f* f* f* f* f* f* f* f* f* bf f2 f4 f8 c4 c8 f* f* c*
c*  c* c* c* c* c* c* c* c* c* c4 c4 c4 c8 c4 c8 c* c* c*
"""

LABELS = {
    "b1": np.bool_,
    "u1": np.uint8,
    "u2": np.uint16,
    "u4": np.uint32,
    "u8": np.uint64,
    "i1": np.int8,
    "i2": np.int16,
    "i4": np.int32,
    "i8": np.int64,
    "bf": BF16,
    "f2": np.float16,
    "f4": np.float32,
    "f8": np.float64,
    "c4": np.complex64,
    "c8": np.complex128,
}
WEAK_64 = {"i*": np.int64, "f*": np.float64, "c*": np.complex128}
PYTHON_SCALARS = {"i*": 3, "f*": 1.5, "c*": 2j}


def _parse_table():
    lines = [line.split() for line in PROMOTION_TABLE.strip().splitlines()]
    columns = lines[0]
    return [
        (row[0], column, result) for row in lines[1:] for column, result in zip(columns, row[1:])
    ]


PAIRS = _parse_table()


def _expected(label: str, x64: bool) -> tuple[np.dtype, bool]:
    weak = label in WEAK_64
    dtype = np.dtype(WEAK_64[label] if weak else LABELS[label])
    if not x64:
        dtype = {
            np.dtype(np.int64): np.dtype(np.int32),
            np.dtype(np.uint64): np.dtype(np.uint32),
            np.dtype(np.float64): np.dtype(np.float32),
            np.dtype(np.complex128): np.dtype(np.complex64),
        }.get(dtype, dtype)
    return dtype, weak


def _value(label: str):
    if label in PYTHON_SCALARS:
        return PYTHON_SCALARS[label]
    return jnp.zeros((2,), LABELS[label])


@pytest.fixture
def x64():
    with x64_mode(True):
        yield


@pytest.fixture
def x32():
    with x64_mode(False):
        yield


def test_table_is_symmetric_and_complete():
    table = {(a, b): r for a, b, r in PAIRS}
    assert len(table) == 18 * 18
    for (a, b), r in table.items():
        assert table[(b, a)] == r, (a, b)


@pytest.mark.parametrize("a,b,result", PAIRS, ids=[f"{a}+{b}" for a, b, _ in PAIRS])
def test_promotion_with_x64(a, b, result, x64):
    """jnp.add on arrays (and Python scalars for the weak types) follows the table."""
    out = jnp.add(_value(a), _value(b))
    assert (out.dtype, out.weak_type) == _expected(result, x64=True)
    if a in LABELS and b in LABELS:
        assert jnp.promote_types(LABELS[a], LABELS[b]) == _expected(result, True)[0]


@pytest.mark.parametrize("a,b,result", PAIRS, ids=[f"{a}+{b}" for a, b, _ in PAIRS])
def test_promotion_without_x64_narrows_64_bit_results(a, b, result, x32):
    if a in LABELS and b in LABELS:
        assert jnp.promote_types(LABELS[a], LABELS[b]) == _expected(result, False)[0]
    if {a, b} & {"u8", "i8", "f8", "c8"}:
        return  # 64-bit arrays cannot be made without x64; promote_types covers them
    out = jnp.add(_value(a), _value(b))
    assert (out.dtype, out.weak_type) == _expected(result, x64=False)


@pytest.mark.parametrize("a,b,result", PAIRS[::7], ids=[f"{a}+{b}" for a, b, _ in PAIRS[::7]])
def test_promotion_is_the_same_under_tracing(a, b, result, x64):
    if a in PYTHON_SCALARS or b in PYTHON_SCALARS:
        args = [v for v in (_value(a), _value(b))]
        out = kiln.make_jaxpr(lambda: jnp.add(*args))().out_avals[0]
    else:
        out = kiln.make_jaxpr(jnp.add)(_value(a), _value(b)).out_avals[0]
    assert (out.dtype, out.weak_type) == _expected(result, x64=True)


def test_against_jax_when_installed(x64):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    try:
        import jax.numpy as jjnp

        for a, b, _ in PAIRS:
            ours = jnp.add(_value(a), _value(b))
            theirs = jjnp.add(
                *(
                    PYTHON_SCALARS[x] if x in PYTHON_SCALARS else jjnp.zeros((2,), LABELS[x])
                    for x in (a, b)
                )
            )
            assert (ours.dtype, ours.weak_type) == (theirs.dtype, theirs.weak_type), (a, b)
    finally:
        jax.config.update("jax_enable_x64", False)


# --- weak types --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make,dtype,weak",
    [
        (lambda: jnp.arange(3) * 2.0, np.float32, True),
        (lambda: jnp.ones(3, jnp.int8) + 1, np.int8, False),
        (lambda: jnp.ones(3, jnp.uint8) * 2, np.uint8, False),
        (lambda: jnp.ones(3, jnp.int8) + 1.0, np.float32, True),
        (lambda: jnp.ones(3, jnp.float16) * 2.0, np.float16, False),
        (lambda: jnp.ones(3, jnp.bfloat16) + 1, BF16, False),
        (lambda: jnp.ones(3, jnp.bfloat16) + jnp.ones(3, jnp.float16), np.float32, False),
        (lambda: jnp.ones(3, jnp.int8) + jnp.ones(3, jnp.uint8), np.int16, False),
        (lambda: jnp.ones(3, jnp.float32) + 1j, np.complex64, False),
        (lambda: jnp.ones(3, jnp.float16) + 1j, np.complex64, False),
        (lambda: jnp.add(True, 1), np.int32, True),
        (lambda: jnp.array([True]) + 1, np.int32, True),
        (lambda: jnp.array([True]) + 1.0, np.float32, True),
        (lambda: jnp.array([True, False]) + True, np.bool_, False),
        (lambda: jnp.add(1, 2), np.int32, True),
        (lambda: jnp.add(1, 2.0), np.float32, True),
        (lambda: jnp.multiply(2.0, 1j), np.complex64, True),
        (lambda: jnp.asarray(3.0), np.float32, True),
        (lambda: jnp.array(3), np.int32, True),
        (lambda: jnp.array([3]), np.int32, False),
        (lambda: jnp.float32(3), np.float32, False),
        (lambda: jnp.asarray(3.0).astype(jnp.float32), np.float32, False),
        (lambda: jnp.int8(1) + 1, np.int8, False),
        (lambda: jnp.int32(1) + 1.0, np.float32, True),
        (lambda: jnp.sqrt(4), np.float32, True),
        (lambda: jnp.equal(1.0, 2.0), np.bool_, True),
        (lambda: jnp.arange(3) < 2, np.bool_, False),
        (lambda: lax.add(1.0, 2.0), np.float32, True),
        (lambda: lax.add(jnp.float32(1.0), 2.0), np.float32, False),
        (lambda: lax.convert_element_type(3, jnp.float32, weak_type=True), np.float32, True),
    ],
)
def test_weak_type_cases(make, dtype, weak):
    out = make()
    assert (out.dtype, out.weak_type) == (np.dtype(dtype), weak)


def test_weak_scalars_keep_the_arrays_dtype_in_a_chain():
    x = jnp.ones(3, jnp.float16)
    y = (x * 2 + 1.5) / 3 - 7
    assert y.dtype == np.float16 and not y.weak_type
    z = jnp.asarray(2.0) * 3  # weak times weak stays weak
    assert z.weak_type and z.dtype == np.float32
    assert (z + jnp.ones(2, jnp.bfloat16)).dtype == BF16


def test_weak_types_show_in_jaxprs_and_reprs():
    closed = kiln.make_jaxpr(lambda x: x * 2)(1.0)
    assert closed.in_avals[0].weak_type and closed.out_avals[0].weak_type
    assert repr(jnp.asarray(10.0)) == "Array(10., dtype=float32, weak_type=True)"
    assert repr(jnp.asarray(10.0) + jnp.float32(0)) == "Array(10., dtype=float32)"


# --- the x64 flag ------------------------------------------------------------------------------


def test_x64_off_by_default_narrows_everything(x32):
    assert jnp.array(1.0).dtype == np.float32
    assert jnp.array(1).dtype == np.int32
    assert jnp.array(1j).dtype == np.complex64
    assert jnp.array(np.arange(3, dtype=np.int64)).dtype == np.int32
    assert jnp.array(np.arange(3, dtype=np.uint64)).dtype == np.uint32
    assert jnp.zeros(2, jnp.float64).dtype == np.float32
    assert jnp.float64(1).dtype == np.float32
    assert jnp.int64(1).dtype == np.int32
    assert (jnp.arange(3) * 2.0).dtype == np.float32
    assert jnp.result_type(np.float64) == np.float32
    assert dtypes.canonicalize(np.int64) == np.int32


def test_x64_on_keeps_64_bits(x64):
    assert jnp.array(1.0).dtype == np.float64
    assert jnp.array(1).dtype == np.int64
    assert jnp.array(1j).dtype == np.complex128
    assert jnp.zeros(2, jnp.float64).dtype == np.float64
    assert jnp.float64(1).dtype == np.float64
    out = jnp.arange(3) * 2.0 if hasattr(jnp, "arange") else jnp.array([0, 1, 2]) * 2.0
    assert (out.dtype, out.weak_type) == (np.float64, True)
    # Weak scalars still defer to 32-bit arrays: x64 does not widen them.
    assert (jnp.ones(2, jnp.float32) * 2.0).dtype == np.float32
    assert (jnp.ones(2, jnp.int32) + 1).dtype == np.int32
    assert jnp.float_power(jnp.ones(2, jnp.int32), 2).dtype == np.float64
    # Integers of up to 32 bits become float32 even with x64 (as in JAX); int64 float64.
    assert jnp.sqrt(jnp.ones(2, jnp.int32)).dtype == np.float32
    assert jnp.sqrt(jnp.ones(2, jnp.int64)).dtype == np.float64
    assert jnp.sqrt(2).dtype == np.float64


def test_x64_flag_is_restored_after_use():
    before = kiln.config.read("jax_enable_x64")
    kiln.config.update("jax_enable_x64", not before)
    try:
        assert kiln.config.read("jax_enable_x64") == (not before)
    finally:
        kiln.config.update("jax_enable_x64", before)
    assert kiln.config.read("jax_enable_x64") == before


# --- scalar types and dtype queries ------------------------------------------------------------

SCALAR_TYPES = [
    (jnp.bool_, np.bool_),
    (jnp.int8, np.int8),
    (jnp.int16, np.int16),
    (jnp.int32, np.int32),
    (jnp.int64, np.int64),
    (jnp.uint8, np.uint8),
    (jnp.uint16, np.uint16),
    (jnp.uint32, np.uint32),
    (jnp.uint64, np.uint64),
    (jnp.float16, np.float16),
    (jnp.bfloat16, BF16),
    (jnp.float32, np.float32),
    (jnp.float64, np.float64),
    (jnp.complex64, np.complex64),
    (jnp.complex128, np.complex128),
]


@pytest.mark.parametrize(
    "scalar_type,np_type", SCALAR_TYPES, ids=[np.dtype(t).name for _, t in SCALAR_TYPES]
)
def test_scalar_types_work_as_dtypes_and_constructors(scalar_type, np_type, x64):
    dtype = np.dtype(np_type)
    assert np.dtype(scalar_type) == dtype
    assert jnp.dtype(scalar_type) == dtype
    assert scalar_type.dtype == dtype
    assert dtype == scalar_type and scalar_type == dtype.type
    assert hash(scalar_type) == hash(dtype.type)
    assert jnp.zeros(3, scalar_type).dtype == dtype
    assert jnp.ones(2).astype(scalar_type).dtype == dtype
    value = scalar_type(1)
    assert isinstance(value, kiln.Array) and not isinstance(value, scalar_type)
    assert (value.dtype, value.weak_type, value.shape) == (dtype, False, ())
    assert scalar_type([1, 0]).shape == (2,)
    assert scalar_type.__name__ == dtype.name.replace("bool", "bool_")


def test_scalar_type_calls_convert_like_jax():
    assert repr(jnp.float32(2)) == "Array(2., dtype=float32)"
    assert repr(jnp.int32(3.7)) == "Array(3, dtype=int32)"
    assert repr(jnp.bool_(2)) == "Array(True, dtype=bool)"
    assert (
        repr(jnp.float32(jnp.arange(3) if hasattr(jnp, "arange") else jnp.array([0, 1, 2])))
        == "Array([0., 1., 2.], dtype=float32)"
    )
    with pytest.raises(OverflowError):
        jnp.int8(300)
    jaxpr = kiln.make_jaxpr(lambda x: jnp.float32(x))(1)
    assert "convert_element_type[new_dtype=float32 weak_type=False]" in str(jaxpr)
    assert repr(jnp.float32) == "<class 'kiln.numpy.float32'>"


def test_issubdtype():
    assert jnp.issubdtype(jnp.float32, jnp.floating)
    assert jnp.issubdtype(jnp.bfloat16, jnp.floating)
    assert jnp.issubdtype(jnp.bfloat16, jnp.inexact)
    assert not jnp.issubdtype(jnp.bfloat16, jnp.integer)
    assert jnp.issubdtype(np.int8, jnp.signedinteger)
    assert not jnp.issubdtype(jnp.uint8, jnp.signedinteger)
    assert jnp.issubdtype(jnp.complex64, jnp.complexfloating)
    assert jnp.issubdtype(jnp.float32, np.float32)
    assert not jnp.issubdtype(jnp.float32, jnp.float16)
    assert jnp.issubdtype(jnp.bool_, jnp.bool_)
    assert jnp.issubdtype(jnp.arange(3).dtype if hasattr(jnp, "arange") else np.int32, jnp.integer)
    assert jnp.issubdtype(jnp.floating, jnp.inexact)


def test_isdtype():
    assert jnp.isdtype(jnp.float32, "real floating")
    assert jnp.isdtype(jnp.bfloat16, "real floating")
    assert jnp.isdtype(jnp.int8, ("integral", "bool"))
    assert jnp.isdtype(jnp.bool_, "bool") and not jnp.isdtype(jnp.bool_, "numeric")
    assert jnp.isdtype(jnp.complex64, "numeric") and jnp.isdtype(jnp.uint8, "unsigned integer")
    assert not jnp.isdtype(jnp.uint8, "signed integer")
    assert jnp.isdtype(jnp.float16, jnp.float16) and not jnp.isdtype(jnp.float16, jnp.float32)
    with pytest.raises(ValueError, match="kind"):
        jnp.isdtype(jnp.float32, "floating point")


def test_can_cast():
    assert jnp.can_cast(jnp.int8, jnp.int32)
    assert not jnp.can_cast(jnp.float32, jnp.int32)
    assert jnp.can_cast(jnp.float32, jnp.int32, "unsafe")
    assert jnp.can_cast(jnp.int8, jnp.bfloat16)
    assert not jnp.can_cast(jnp.bfloat16, jnp.float16)
    assert jnp.can_cast(jnp.bfloat16, jnp.float32)
    assert jnp.can_cast(jnp.float32, jnp.bfloat16, "same_kind")
    assert jnp.can_cast(jnp.ones(2, jnp.int8), jnp.int16)
    with pytest.raises(TypeError, match="Python"):
        jnp.can_cast(3, jnp.int8)


def test_promote_types_and_result_type():
    assert jnp.promote_types(jnp.int8, jnp.uint8) == np.int16
    assert jnp.promote_types(jnp.bfloat16, jnp.float16) == np.float32
    assert jnp.promote_types("int8", "float16") == np.float16
    assert jnp.result_type(jnp.ones(2, jnp.int8), 1.0) == np.float32
    assert jnp.result_type(jnp.ones(2, jnp.int8), 1) == np.int8
    assert jnp.result_type(jnp.int16, jnp.uint8) == np.int16
    with pytest.raises(TypeError):
        jnp.promote_types(np.dtype("U3"), np.int8)
