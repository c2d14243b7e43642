"""Random kiln programs for differential testing: a catalog of ops, each with the accuracy its
native lowering promises; a hypothesis strategy that draws a DAG of them over a few typed
inputs (values feeding several consumers); and input values with edge cases.

tests/test_fuzz_programs.py runs the programs and compares: end to end bit for bit where every
op in an output's cone is exact (integer and bool ops, IEEE-exact float ops), and op by op
within each op's accuracy class everywhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

import kiln
import kiln.numpy as jnp
from kiln import lax
from kiln.codegen.llvm import vmath

BOOL = np.dtype(np.bool_)
BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
SIGNED_32 = [np.dtype(t) for t in (np.int8, np.int16, np.int32)]
UNSIGNED_32 = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32)]
FLOATS_32 = [F16, BF16, F32]
DTYPES_32 = [BOOL, *SIGNED_32, *UNSIGNED_32, *FLOATS_32]
DTYPES_64 = DTYPES_32 + [np.dtype(np.int64), np.dtype(np.uint64), F64]

#: Dimension sizes to draw from: empty, unit (broadcasting), odd, and vector-width neighbours
#: (the first is what hypothesis shrinks towards).
DIMS = [5, 3, 16, 1, 17, 0, 2, 33, 7, 4, 1, 64]
MAX_SIZE = 4096


def is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f" or np.dtype(dtype) == BF16


def is_int(dtype) -> bool:
    return np.dtype(dtype).kind in "iu"


def finfo(dtype):
    return ml_dtypes.finfo(dtype)


# ---------------------------------------------------------------------------------------------
# Accuracy classes: how the native value of one op may differ from the reference impl

EXACT = "exact"  # bit for bit, sign of zero included
NOSIGN = "nosign"  # equal values, the sign of a zero result unspecified (min/max of +-0)
ADD = "add"  # float add/sub: an FMA may absorb a producing multiply
SUM = "sum"  # float reductions: summation order is free
PROD = "prod"  # float products: order is free
NAN_SIGN = "nan_sign"  # reads the sign bit, which a computed NaN leaves unspecified
#: anything else is ("ulp", k): within k units in the last place of the result

#: max/min/clip/clamp of +0.0 and -0.0: native code and the reference impls both order -0.0
#: below +0.0 (IEEE 754 maximum/minimum, as XLA), so these are exact.
MIN_MAX = EXACT


@dataclass(frozen=True)
class Type:
    """The shape and dtype of a program value."""

    shape: tuple
    dtype: np.dtype

    def __repr__(self) -> str:
        return f"{self.dtype.name}{list(self.shape)}"


@dataclass(frozen=True)
class OpSpec:
    """One kind of node. `apply(params, *values)` builds it with kiln; `params(draw, types)`
    draws its static parameters (or returns None when the operand types do not fit);
    `accuracy(params, types)` gives its accuracy class for float results."""

    name: str
    arity: int
    apply: Callable
    params: Callable
    accuracy: Callable = lambda params, types: EXACT
    family: str = "elementwise"
    partner: Callable | None = None  # which later operands suit the first; default: any


@dataclass
class Node:
    """One value of a program: an op applied to earlier nodes (by index), or an input.
    exact_cone: every op it depends on is exact, so native must match bit for bit.
    mul_like: a float multiply whose result a following add may absorb into an FMA."""

    op: OpSpec | None  # None for a program input
    inputs: tuple
    params: Any
    type: Type
    exact_cone: bool = True
    mul_like: bool = False


class Program:
    """A DAG of nodes (inputs first), the ids it returns, and how its input values are drawn."""

    def __init__(
        self,
        nodes: list,
        outputs: list,
        value_seed: int,
        edge_rate: float,
        labels: list | None = None,
    ):
        self.nodes, self.outputs = nodes, outputs
        self.value_seed, self.edge_rate = value_seed, edge_rate
        self.num_inputs = sum(node.op is None for node in nodes)
        self.labels = labels or list(range(len(nodes)))  # node numbers shown by repr

    def restricted(self, outputs) -> Program:
        """The same program (same inputs and values) computing only `outputs` and the ops
        they depend on: the short form of a failing case."""
        keep, stack = set(range(self.num_inputs)), list(outputs)
        while stack:
            i = stack.pop()
            if i not in keep:
                keep.add(i)
                stack.extend(self.nodes[i].inputs)
        order = sorted(keep)
        renumber = {old: new for new, old in enumerate(order)}
        nodes = []
        for i in order:
            node = self.nodes[i]
            nodes.append(
                Node(
                    node.op,
                    tuple(renumber[j] for j in node.inputs),
                    node.params,
                    node.type,
                    node.exact_cone,
                    node.mul_like,
                )
            )
        return Program(
            nodes,
            [renumber[i] for i in outputs],
            self.value_seed,
            self.edge_rate,
            [self.labels[i] for i in order],
        )

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))

    def function(self, outputs=None) -> Callable:
        """The program as a Python function of its inputs, returning `outputs` (node ids)."""
        wanted = self.outputs if outputs is None else outputs

        def program(*args):
            env = list(args)
            for node in self.nodes[len(args) :]:
                env.append(node.op.apply(node.params, *(env[i] for i in node.inputs)))
            return [env[i] for i in wanted]

        return program

    def input_values(self) -> list[np.ndarray]:
        rng = np.random.default_rng(self.value_seed)
        return [
            random_values(node.type, rng, self.edge_rate) for node in self.nodes if node.op is None
        ]

    def __repr__(self) -> str:
        lines = [f"# value_seed={self.value_seed} edge_rate={self.edge_rate}"]
        names = [f"v{i}" for i in self.labels]
        args = ", ".join(names[: self.num_inputs])
        types = ", ".join(repr(n.type) for n in self.nodes[: self.num_inputs])
        lines.append(f"def program({args}):  # {types}")
        for i, node in enumerate(self.nodes[self.num_inputs :], self.num_inputs):
            operands = ", ".join(names[j] for j in node.inputs)
            lines.append(
                f"    {names[i]} = {node.op.name}({operands}; {node.params!r})  # {node.type!r}"
            )
        lines.append(f"    return {', '.join(names[i] for i in self.outputs)}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Input values


def _edge_values(dtype) -> np.ndarray:
    if dtype == BOOL:
        return np.array([False, True])
    if is_int(dtype):
        info = np.iinfo(dtype)
        values = {0, 1, 2, info.max, info.max - 1, info.min, 7}
        if info.min < 0:
            values |= {-1, -2, info.min + 1}
        return np.array(sorted(values), dtype=dtype)
    info = finfo(dtype)
    values = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        np.inf,
        -np.inf,
        np.nan,
        float(info.max),
        -float(info.max),
        float(info.tiny),
        -float(info.smallest_subnormal),
        3.0,
        1e4,
    ]
    return np.array(values, np.float64).astype(dtype)


def random_values(type_: Type, rng: np.random.Generator, edge_rate: float) -> np.ndarray:
    """Values of one type: mostly small, a fraction `edge_rate` of edge values."""
    shape, dtype = type_.shape, type_.dtype
    if dtype == BOOL:
        values = rng.random(shape) < 0.5
    elif is_int(dtype):
        info = np.iinfo(dtype)
        low = max(info.min, -20)
        values = rng.integers(low, min(info.max, 20), shape, endpoint=True).astype(dtype)
        wide = rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)
        values = np.where(rng.random(shape) < 0.2, wide, values)
    else:
        values = (rng.standard_normal(shape) * 3).astype(dtype)
    edges = _edge_values(dtype)
    picks = edges[rng.integers(0, len(edges), shape)]
    return np.where(rng.random(shape) < edge_rate, picks, values).astype(dtype)


# ---------------------------------------------------------------------------------------------
# The op catalog


def _ulp(op: str, slack: float = 1.0) -> Callable:
    """Accuracy of a vmath op: its stated bound plus slack for the reference's own rounding;
    float16/bfloat16 go through float32 and round once on both sides."""

    def accuracy(params, types):
        dtype = types[0].dtype
        if dtype in (F16, BF16):
            return ("ulp", 1.0)
        return ("ulp", vmath.MAX_ULP[(op, dtype.name)] + slack)

    return accuracy


def _floats(types) -> bool:
    return all(is_float(t.dtype) for t in types)


def _no_params(predicate):
    def params(draw, types):
        return () if predicate(types) else None

    return params


UNARY_FLOAT = {
    "exp": jnp.exp,
    "expm1": jnp.expm1,
    "log": jnp.log,
    "log1p": jnp.log1p,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "tanh": jnp.tanh,
    "atan": jnp.arctan,
    "asin": jnp.arcsin,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "asinh": jnp.arcsinh,
    "acosh": jnp.arccosh,
    "atanh": jnp.arctanh,
    "logistic": lax.logistic,
    "erf": lax.erf,
    "erfc": lax.erfc,
    "cbrt": jnp.cbrt,
    "log2": jnp.log2,
    "log10": jnp.log10,
    "exp2": jnp.exp2,
}
UNARY_FLOAT_EXACT = {
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "round": jnp.round,
    "trunc": jnp.trunc,
    "round_away": lax.round,
    "sqrt": jnp.sqrt,
    "reciprocal": jnp.reciprocal,
    "isnan": jnp.isnan,
    "isinf": jnp.isinf,
    "isfinite": jnp.isfinite,
}
UNARY_ANY = {
    "negative": jnp.negative,
    "abs": jnp.abs,
    "sign": jnp.sign,
    "square": jnp.square,
    "logical_not": jnp.logical_not,
}
UNARY_INT = {
    "invert": jnp.invert,
    "popcount": lax.population_count,
    "clz": lax.clz,
}
BINARY = {
    "add": jnp.add,
    "subtract": jnp.subtract,
    "multiply": jnp.multiply,
    "true_divide": jnp.true_divide,
    "floor_divide": jnp.floor_divide,
    "remainder": jnp.remainder,
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
    "equal": jnp.equal,
    "not_equal": jnp.not_equal,
    "less": jnp.less,
    "greater_equal": jnp.greater_equal,
    "logical_and": jnp.logical_and,
    "logical_xor": jnp.logical_xor,
}
BINARY_INT = {
    "bitwise_and": jnp.bitwise_and,
    "bitwise_or": jnp.bitwise_or,
    "bitwise_xor": jnp.bitwise_xor,
    "left_shift": jnp.left_shift,
    "right_shift": jnp.right_shift,
}
BINARY_FLOAT = {"arctan2": jnp.arctan2, "nextafter": jnp.nextafter, "power": jnp.power}
MUL_LIKE = {"multiply", "square", "integer_pow", "scalar_multiply"}


def _binary_accuracy(name):
    def accuracy(params, types):
        if name in ("add", "subtract", "scalar_add"):
            return ADD
        if name in ("maximum", "minimum"):
            return MIN_MAX
        return EXACT

    return accuracy


def _unary_ops() -> list[OpSpec]:
    ops = []
    for name, fn in UNARY_FLOAT.items():
        ops.append(OpSpec(name, 1, lambda p, x, fn=fn: fn(x), _no_params(_floats), _ulp(name)))
    for name, fn in UNARY_FLOAT_EXACT.items():
        ops.append(OpSpec(name, 1, lambda p, x, fn=fn: fn(x), _no_params(_floats)))
    ops.append(
        OpSpec(
            "signbit", 1, lambda p, x: jnp.signbit(x), _no_params(_floats), lambda p, t: NAN_SIGN
        )
    )
    for name, fn in UNARY_ANY.items():
        ops.append(OpSpec(name, 1, lambda p, x, fn=fn: fn(x), _no_params(lambda t: True)))
    for name, fn in UNARY_INT.items():
        ops.append(
            OpSpec(name, 1, lambda p, x, fn=fn: fn(x), _no_params(lambda t: is_int(t[0].dtype)))
        )

    def pow_params(draw, types):
        if types[0].dtype == BOOL:
            return None
        low = -2 if is_float(types[0].dtype) else 0
        return draw(st.integers(low, 4))

    ops.append(OpSpec("integer_pow", 1, lambda p, x: lax.integer_pow(x, p), pow_params))

    def astype_params(draw, types):
        # 64-bit targets with x64 off exercise dtype canonicalization.
        return draw(st.sampled_from(DTYPES_64))

    ops.append(OpSpec("astype", 1, lambda p, x: x.astype(p), astype_params))

    def clip_params(draw, types):
        if types[0].dtype == BOOL:
            return None
        low = draw(st.integers(-5, 5))
        return (low, low + draw(st.integers(0, 5)))

    ops.append(OpSpec("clip", 1, lambda p, x: jnp.clip(x, *p), clip_params, lambda p, t: MIN_MAX))
    return ops


def _scalar_params(draw, types):
    dtype = types[0].dtype
    if dtype == BOOL:
        return None
    side = draw(st.booleans())
    if is_float(dtype):
        value = draw(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 1e-3]))
    else:
        value = draw(st.sampled_from([0, 1, 2, 3, 7] + ([-1, -3] if dtype.kind == "i" else [])))
    return (side, value)


def _integer_operands(types) -> bool:
    return all(is_int(t.dtype) or t.dtype == BOOL for t in types)


def _integer_shift_operands(types) -> bool:
    return _integer_operands(types) and not all(t.dtype == BOOL for t in types)


def _binary_ops() -> list[OpSpec]:
    ops = []
    for name, fn in BINARY.items():
        ops.append(
            OpSpec(
                name,
                2,
                lambda p, x, y, fn=fn: fn(x, y),
                _no_params(lambda t: True),
                _binary_accuracy(name),
            )
        )
    for name, fn in BINARY_INT.items():
        integer = _integer_shift_operands if "shift" in name else _integer_operands
        ops.append(OpSpec(name, 2, lambda p, x, y, fn=fn: fn(x, y), _no_params(integer)))
    for name, fn in BINARY_FLOAT.items():
        accuracy = (
            _ulp("atan2")
            if name == "arctan2"
            else (_ulp("pow") if name == "power" else lambda p, t: EXACT)
        )
        ops.append(OpSpec(name, 2, lambda p, x, y, fn=fn: fn(x, y), _no_params(_floats), accuracy))
    for name, fn in (
        ("scalar_add", jnp.add),
        ("scalar_multiply", jnp.multiply),
        ("scalar_subtract", jnp.subtract),
        ("scalar_maximum", jnp.maximum),
        ("scalar_less", jnp.less),
        ("scalar_floor_divide", jnp.floor_divide),
        ("scalar_remainder", jnp.remainder),
        ("scalar_true_divide", jnp.divide),
    ):

        def apply(p, x, fn=fn):
            side, value = p
            return fn(x, value) if side else fn(value, x)

        base = name.removeprefix("scalar_")
        ops.append(
            OpSpec(
                name,
                1,
                apply,
                _scalar_params,
                _binary_accuracy("add" if base == "subtract" else base),
            )
        )

    ops.append(
        OpSpec(
            "where",
            3,
            lambda p, c, x, y: jnp.where(c.astype(bool), x, y),
            _no_params(lambda t: True),
        )
    )
    # lax's own division and remainder (C semantics: truncating, INT_MIN / -1, x / 0), with
    # the second operand converted to the first's dtype as lax requires.
    numeric = _no_params(lambda t: t[0].dtype != BOOL)
    ops.append(OpSpec("lax_div", 2, lambda p, x, y: lax.div(x, y.astype(x.dtype)), numeric))
    ops.append(OpSpec("lax_rem", 2, lambda p, x, y: lax.rem(x, y.astype(x.dtype)), numeric))
    ops.append(
        OpSpec(
            "lax_clamp",
            3,
            lambda p, lo, x, hi: lax.clamp(lo.astype(x.dtype), x, hi.astype(x.dtype)),
            _no_params(lambda t: True),
            lambda p, t: MIN_MAX,
        )
    )
    return ops


# --- shape ops --------------------------------------------------------------------------------


def _factor(size: int, draw) -> tuple:
    """A random shape with `size` elements (rank 0..3)."""
    if size == 0:
        rank = draw(st.integers(1, 3))
        dims = [draw(st.sampled_from([0, 1, 2, 3])) for _ in range(rank)]
        dims[draw(st.integers(0, rank - 1))] = 0
        return tuple(dims)
    divisors = [d for d in range(1, size + 1) if size % d == 0]
    dims, rest = [], size
    for _ in range(draw(st.integers(0, 2))):
        d = draw(st.sampled_from([d for d in divisors if rest % d == 0]))
        dims.append(d)
        rest //= d
    if rest != 1 or not dims or draw(st.booleans()):
        dims.append(rest)
    return tuple(dims) if size != 1 or dims != [1] or draw(st.booleans()) else ()


def _shape_ops() -> list[OpSpec]:
    ops = []

    def reshape_params(draw, types):
        return _factor(math.prod(types[0].shape), draw)

    ops.append(OpSpec("reshape", 1, lambda p, x: x.reshape(p), reshape_params, family="shape"))

    def transpose_params(draw, types):
        return tuple(draw(st.permutations(range(len(types[0].shape)))))

    ops.append(
        OpSpec("transpose", 1, lambda p, x: jnp.transpose(x, p), transpose_params, family="shape")
    )

    def slice_params(draw, types):
        shape = types[0].shape
        if not shape:
            return None
        index = []
        for dim in shape:
            start = draw(st.one_of(st.none(), st.integers(-dim - 2, dim + 2)))
            stop = draw(st.one_of(st.none(), st.integers(-dim - 2, dim + 2)))
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            index.append((start, stop, step))
        return tuple(index)

    ops.append(
        OpSpec(
            "slice", 1, lambda p, x: x[tuple(slice(*s) for s in p)], slice_params, family="shape"
        )
    )

    def pad_params(draw, types):
        shape = types[0].shape
        if not shape:
            return None
        config = []
        for dim in shape:
            interior = draw(st.integers(0, 2))
            grown = dim + max(dim - 1, 0) * interior
            low = draw(st.integers(-min(grown, 2), 3))
            high = draw(st.integers(-min(grown + min(low, 0), 2), 3))
            config.append((low, high, interior))
        return (draw(st.sampled_from([0, 1, -1])), tuple(config))

    def pad_apply(p, x):
        value, config = p
        return lax.pad(x, jnp.asarray(value).astype(x.dtype), config)

    ops.append(OpSpec("lax_pad", 1, pad_apply, pad_params, family="shape"))

    def jnp_pad_params(draw, types):
        shape = types[0].shape
        if not shape:
            return None
        mode = draw(st.sampled_from(["constant", "edge", "reflect", "wrap"]))
        if mode != "constant" and 0 in shape:
            return None
        widths = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in shape)
        return (mode, widths)

    ops.append(
        OpSpec(
            "jnp_pad", 1, lambda p, x: jnp.pad(x, p[1], mode=p[0]), jnp_pad_params, family="shape"
        )
    )

    def concat_params(draw, types):
        a, b = types
        if not a.shape or len(a.shape) != len(b.shape):
            return None
        axes = [
            ax
            for ax in range(len(a.shape))
            if all(a.shape[d] == b.shape[d] for d in range(len(a.shape)) if d != ax)
        ]
        return draw(st.sampled_from(axes)) if axes else None

    def concat_partner(a, b):
        return len(a) == len(b) and sum(x != y for x, y in zip(a, b)) <= 1

    ops.append(
        OpSpec(
            "concatenate",
            2,
            lambda p, x, y: jnp.concatenate([x, y, x], axis=p),
            concat_params,
            family="shape",
            partner=concat_partner,
        )
    )

    def broadcast_params(draw, types):
        shape = types[0].shape
        lead = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), max_size=2)))
        grown = tuple(
            draw(st.sampled_from([2, 3])) if d == 1 and draw(st.booleans()) else d for d in shape
        )
        return lead + grown

    ops.append(
        OpSpec(
            "broadcast_to", 1, lambda p, x: jnp.broadcast_to(x, p), broadcast_params, family="shape"
        )
    )

    def expand_params(draw, types):
        return draw(st.integers(0, len(types[0].shape)))

    ops.append(
        OpSpec("expand_dims", 1, lambda p, x: jnp.expand_dims(x, p), expand_params, family="shape")
    )

    def flip_params(draw, types):
        rank = len(types[0].shape)
        return tuple(sorted(draw(st.sets(st.integers(0, rank - 1))))) if rank else None

    ops.append(OpSpec("flip", 1, lambda p, x: jnp.flip(x, p), flip_params, family="shape"))

    def roll_params(draw, types):
        rank = len(types[0].shape)
        return (draw(st.integers(-5, 5)), draw(st.integers(0, rank - 1))) if rank else None

    ops.append(
        OpSpec("roll", 1, lambda p, x: jnp.roll(x, p[0], axis=p[1]), roll_params, family="shape")
    )
    return ops


# --- reductions -------------------------------------------------------------------------------


def _axes_params(need_nonempty: bool):
    def params(draw, types):
        shape = types[0].shape
        axes = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1))))) if shape else ()
        if not axes and shape and draw(st.booleans()):
            axes = None
        reduced = shape if axes is None else [shape[a] for a in axes]
        if need_nonempty and 0 in reduced:
            return None
        return (axes, draw(st.booleans()))

    return params


def _reduction_ops() -> list[OpSpec]:
    ops = []
    for name, fn, accuracy, nonempty in (
        ("sum", jnp.sum, SUM, False),
        ("mean", jnp.mean, SUM, False),
        ("prod", jnp.prod, PROD, False),
        ("max", jnp.max, EXACT, True),
        ("min", jnp.min, EXACT, True),
        ("all", jnp.all, EXACT, False),
        ("any", jnp.any, EXACT, False),
    ):
        ops.append(
            OpSpec(
                name,
                1,
                lambda p, x, fn=fn: fn(x, axis=p[0], keepdims=p[1]),
                _axes_params(nonempty),
                lambda p, t, accuracy=accuracy: accuracy,
                family="reduction",
            )
        )

    def arg_params(draw, types):
        shape = types[0].shape
        if not shape:
            return None
        axis = draw(st.integers(0, len(shape) - 1))
        return None if shape[axis] == 0 else axis

    ops.append(
        OpSpec("argmax", 1, lambda p, x: jnp.argmax(x, axis=p), arg_params, family="reduction")
    )
    ops.append(
        OpSpec("argmin", 1, lambda p, x: jnp.argmin(x, axis=p), arg_params, family="reduction")
    )

    def cum_params(draw, types):
        shape = types[0].shape
        return draw(st.integers(0, len(shape) - 1)) if shape else None

    ops.append(
        OpSpec(
            "cumsum",
            1,
            lambda p, x: jnp.cumsum(x, axis=p),
            cum_params,
            lambda p, t: SUM,
            family="reduction",
        )
    )
    ops.append(
        OpSpec("cummax", 1, lambda p, x: lax.cummax(x, axis=p), cum_params, family="reduction")
    )
    return ops


# --- indexing ---------------------------------------------------------------------------------


def _index_array(draw, dim: int, size_max: int = 6) -> np.ndarray:
    """Indices into a dimension of size `dim`: in range, negative and out of bounds."""
    count = draw(st.integers(0, size_max))
    low, high = -dim - 3, dim + 3
    return np.array([draw(st.integers(low, high)) for _ in range(count)], np.int32)


def scalar_index(i):
    """Any value as an int32 start index (its sum: wraps, and 0 when empty)."""
    return jnp.sum(i.astype(np.int32))


def _indexing_ops() -> list[OpSpec]:
    ops = []

    def take_params(draw, types):
        shape = types[0].shape
        if not shape:
            return None
        axis = draw(st.integers(0, len(shape) - 1))
        if shape[axis] == 0:
            return None
        return (axis, tuple(_index_array(draw, shape[axis]).tolist()))

    def take_apply(p, x):
        axis, index = p
        return x[(slice(None),) * axis + (jnp.asarray(np.array(index, np.int32)),)]

    ops.append(OpSpec("gather", 1, take_apply, take_params, family="indexing"))

    def gather_node_params(draw, types):
        x, i = types
        if not x.shape or x.shape[0] == 0:
            return None
        return ()

    ops.append(
        OpSpec(
            "gather_by_node",
            2,
            lambda p, x, i: x[i.astype(np.int32)],
            gather_node_params,
            family="indexing",
        )
    )

    def dynamic_slice_params(draw, types):
        x, i = types
        if not x.shape:
            return None
        sizes = tuple(draw(st.integers(0, d)) for d in x.shape)
        offsets = tuple(draw(st.integers(-2, d + 2)) for d in x.shape)
        return (sizes, offsets)

    def dynamic_slice_apply(p, x, i):
        sizes, offsets = p
        starts = [scalar_index(i) + o if k == 0 else o for k, o in enumerate(offsets)]
        return lax.dynamic_slice(x, starts, sizes)

    ops.append(
        OpSpec("dynamic_slice", 2, dynamic_slice_apply, dynamic_slice_params, family="indexing")
    )

    def dus_params(draw, types):
        x, u, i = types
        if (
            not x.shape
            or len(u.shape) != len(x.shape)
            or any(a > b for a, b in zip(u.shape, x.shape))
        ):
            return None
        return tuple(draw(st.integers(-2, d + 2)) for d in x.shape)

    def dus_apply(p, x, u, i):
        return lax.dynamic_update_slice(
            x, u.astype(x.dtype), [scalar_index(i) + o if k == 0 else o for k, o in enumerate(p)]
        )

    ops.append(OpSpec("dynamic_update_slice", 3, dus_apply, dus_params, family="indexing"))

    def at_params(draw, types):
        x, u = types
        if not x.shape or x.shape[0] == 0:
            return None
        method = draw(st.sampled_from(["set", "add", "multiply", "min", "max"]))
        kind = draw(st.sampled_from(["int", "slice", "array"]))
        if kind == "int":
            index = draw(st.integers(-x.shape[0], x.shape[0] - 1))
        elif kind == "slice":
            index = (
                draw(st.one_of(st.none(), st.integers(-4, 4))),
                draw(st.one_of(st.none(), st.integers(-4, 4))),
                draw(st.sampled_from([None, 1, 2, -1])),
            )
        else:
            index = tuple(_index_array(draw, x.shape[0]).tolist())
            if method == "set":  # which duplicate wins is unspecified
                index = tuple(dict.fromkeys(i % (x.shape[0] + 3) - 3 for i in index))
        if method == "multiply" and x.dtype == BOOL:
            return None
        return (method, kind, index, draw(st.booleans()))

    def at_apply(p, x, u):
        method, kind, index, whole = p
        if kind == "slice":
            index = slice(*index)
        elif kind == "array":
            index = jnp.asarray(np.array(index, np.int32))
        updates = (
            u.astype(x.dtype)
            if whole
            else jnp.max(u, initial=0).astype(x.dtype)
            if u.dtype != BOOL
            else jnp.any(u).astype(x.dtype)
        )
        return getattr(x.at[index], method)(updates)

    def at_accuracy(p, types):
        return {"add": SUM, "multiply": PROD, "min": NOSIGN, "max": NOSIGN}.get(p[0], EXACT)

    ops.append(OpSpec("at", 2, at_apply, at_params, at_accuracy, family="indexing"))
    return ops


# --- control flow -----------------------------------------------------------------------------

#: Bodies that keep the dtype and are exact in every float format (no multiply to contract).
BODIES = {
    "negative": lambda x: -x,
    "abs": jnp.abs,
    "plus_one": lambda x: x + 1,
    "double": lambda x: x * 2,
    "not": lambda x: ~x,
}


def _body_params(draw, types):
    dtype = types[0].dtype
    names = (
        ["not"]
        if dtype == BOOL
        else (["negative", "plus_one", "double"] + ([] if dtype.kind == "u" else ["abs"]))
    )
    if is_int(dtype):
        names.append("not")
    return draw(st.sampled_from(names)), draw(st.sampled_from(names)), draw(st.integers(0, 4))


def _control_flow_ops() -> list[OpSpec]:
    ops = []

    def cond_params(draw, types):
        return _body_params(draw, types[1:])

    def cond_apply(p, pred, x):
        yes, no, _ = p
        return lax.cond(jnp.any(pred), BODIES[yes], BODIES[no], x)

    ops.append(OpSpec("cond", 2, cond_apply, cond_params, family="control"))

    def fori_apply(p, x):
        body, _, count = p
        return lax.fori_loop(0, count, lambda i, c: BODIES[body](c), x)

    ops.append(OpSpec("fori_loop", 1, fori_apply, _body_params, family="control"))

    def while_apply(p, x):
        body, _, count = p
        _, out = lax.while_loop(
            lambda c: c[0] < count, lambda c: (c[0] + 1, BODIES[body](c[1])), (0, x)
        )
        return out

    ops.append(OpSpec("while_loop", 1, while_apply, _body_params, family="control"))

    def scan_params(draw, types):
        x = types[0]
        if not x.shape or x.dtype == BOOL:
            return None
        return _body_params(draw, types)

    def scan_apply(p, x):
        body, _, _ = p

        def step(carry, row):
            carry = BODIES[body](carry) + row
            return carry, carry

        _, ys = lax.scan(step, jnp.zeros_like(x[0]), x)
        return ys

    ops.append(OpSpec("scan", 1, scan_apply, scan_params, lambda p, t: SUM, family="control"))
    return ops


CATALOG = {
    op.name: op
    for op in (
        _unary_ops()
        + _binary_ops()
        + _shape_ops()
        + _reduction_ops()
        + _indexing_ops()
        + _control_flow_ops()
    )
}


# ---------------------------------------------------------------------------------------------
# The program strategy


def _out_type(op: OpSpec, params, types, max_size: int) -> Type | None:
    """The type of op's result on these operands, or None if kiln rejects the combination."""
    zeros = [np.zeros(t.shape, t.dtype) for t in types]
    try:
        _, shape = kiln.make_jaxpr(lambda *a: op.apply(params, *a), return_shape=True)(*zeros)
    except Exception:  # noqa: BLE001 - a rejected combination is simply not drawn
        return None
    if not hasattr(shape, "shape") or math.prod(shape.shape) > max_size:
        return None
    return Type(tuple(shape.shape), np.dtype(shape.dtype))


def broadcastable(a: tuple, b: tuple) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def _pick(draw, candidates: list) -> int:
    """One of `candidates` (node ids), the most recent most likely (and the shrink target)."""
    return candidates[len(candidates) - 1 - draw(st.integers(0, len(candidates) - 1))]


def _draw_node(draw, ops: list, nodes: list, max_size: int) -> Node | None:
    op = draw(st.sampled_from(ops))
    first = _pick(draw, list(range(len(nodes))))
    inputs = [first]
    for _ in range(op.arity - 1):
        fits = op.partner or (broadcastable if op.family == "elementwise" else None)
        candidates = [
            j
            for j in range(len(nodes))
            if fits is None or fits(nodes[first].type.shape, nodes[j].type.shape)
        ]
        inputs.append(_pick(draw, candidates))
    types = [nodes[i].type for i in inputs]
    params = op.params(draw, types)
    if params is None:
        return None
    out = _out_type(op, params, types, max_size)
    if out is None:
        return None
    node = Node(op, tuple(inputs), params, out)
    accuracy = op.accuracy(params, types)
    float_inputs = [nodes[i] for i in inputs if is_float(nodes[i].type.dtype)]
    node.mul_like = op.name in MUL_LIKE or (
        op.name == "negative" and any(n.mul_like for n in float_inputs)
    )
    integer_only = not any(is_float(t.dtype) for t in types + [out])
    local_exact = (
        accuracy == EXACT
        or (integer_only and accuracy != NAN_SIGN)
        or (accuracy == ADD and not any(n.mul_like for n in float_inputs))
    )
    node.exact_cone = local_exact and all(nodes[i].exact_cone for i in inputs)
    return node


@st.composite
def shapes(draw) -> tuple:
    rank = draw(st.sampled_from([2, 1, 3, 2, 1, 3, 0]))
    dims = tuple(draw(st.sampled_from(DIMS)) for _ in range(rank))
    return dims if math.prod(dims) <= MAX_SIZE else tuple(min(d, 3) for d in dims)


@st.composite
def programs(
    draw,
    families=("elementwise", "shape", "reduction", "indexing", "control"),
    max_ops: int = 10,
    dtypes_=None,
    base_shapes=None,
) -> Program:
    """A random program: 1-3 inputs broadcastable to one base shape (drawn, or one of
    `base_shapes`), then up to `max_ops` ops, each reading earlier values (recent ones most
    likely, so values feed several consumers)."""
    dtypes_ = dtypes_ or DTYPES_32
    base = draw(st.sampled_from(base_shapes)) if base_shapes else draw(shapes())
    max_size = max(MAX_SIZE, math.prod(base))
    nodes = []
    for _ in range(draw(st.integers(1, 3))):
        keep = len(base) - draw(st.sampled_from([0, 0, 0, 0, 1]))
        shape = tuple(
            1 if draw(st.integers(0, 4)) == 0 else d for d in base[len(base) - max(keep, 0) :]
        )
        dtype = draw(st.sampled_from(dtypes_))
        nodes.append(Node(None, (), None, Type(shape, np.dtype(dtype))))
    ops = [op for op in CATALOG.values() if op.family in families]
    for _ in range(draw(st.integers(1, max_ops))):
        for _attempt in range(4):  # a combination kiln rejects is redrawn, not dropped
            node = _draw_node(draw, ops, nodes, max_size)
            if node is not None:
                nodes.append(node)
                break
    consumed = {i for node in nodes for i in node.inputs}
    sinks = [i for i in range(len(nodes)) if i not in consumed and nodes[i].op is not None]
    extra = draw(st.lists(st.integers(0, len(nodes) - 1), max_size=2))
    outputs = sorted(set(sinks) | set(extra)) or [len(nodes) - 1]
    seed = draw(st.integers(0, 2**32 - 1))
    edge_rate = draw(st.sampled_from([0.0, 0.1, 0.5]))
    return Program(nodes, outputs, seed, edge_rate)
