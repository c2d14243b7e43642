"""Kernel IR: buffers, hash-consed scalar expression DAGs, loop-nest statements, kernels, programs.

Everything below the jaxpr and above LLVM is said here. The jaxpr lowering builds these nodes,
`kir_verify` checks them, `kir_print` renders them for users, and `codegen/llvm/emit.py` compiles
them. It imports NumPy and ml_dtypes only, never the rest of kiln.
"""

from __future__ import annotations

import enum
import math
import struct
import threading
import weakref
from dataclasses import dataclass
from typing import Callable, Container, Iterable, Sequence

import numpy as np

# kir_ops's names are re-exported: kir is the one import kernel builders need.
from kiln.compiler.kir_ops import (
    ALL_FAMILIES,
    BFLOAT16,
    BOOL,
    DTYPE_SHORT_NAMES,
    INDEX,
    INT_FAMILIES,
    INT_OR_BOOL_FAMILIES,
    NUMERIC_FAMILIES,
    OP_SPECS,
    SUPPORTED_DTYPES,
    KirError,
    OpGroup,
    OpSpec,
    ScalarOp,
    as_dtype,
    check_op,
    dtype_family,
    short_name,
)

__all__ = [
    # dtypes and ops
    "BFLOAT16",
    "BOOL",
    "DTYPE_SHORT_NAMES",
    "INDEX",
    "OP_SPECS",
    "SUPPORTED_DTYPES",
    "KirError",
    "OpGroup",
    "OpSpec",
    "ScalarOp",
    "as_dtype",
    "check_op",
    "dtype_family",
    "short_name",
    # buffers and expressions
    "Buffer",
    "row_major_strides",
    "Expr",
    "Const",
    "Var",
    "Load",
    "Op",
    "Reduce",
    "ReduceKind",
    "ArgValue",
    "ARG_REDUCTIONS",
    "REDUCE_COMBINER",
    "reduce_identity",
    # builders
    "lift",
    "const",
    "op",
    "cast",
    "select",
    "accumulate",
    "as_index",
    "index_add",
    "index_sub",
    "index_mul",
    "index_div",
    "index_rem",
    "index_min",
    "index_max",
    "clamp",
    "affine",
    "flat_index",
    "unravel",
    # statements, kernels, programs, traversal
    "Stmt",
    "Store",
    "Loop",
    "If",
    "MatMul",
    "loop_nest",
    "walk_stmts",
    "stmt_exprs",
    "region_children",
    "toposort",
    "toposort_region",
    "buffers_of",
    "stored_buffers",
    "Kernel",
    "Program",
    "verify_kernel",
    "verify_program",
]

# ---------------------------------------------------------------------------------------------
# Buffers


@dataclass(frozen=True)
class Buffer:
    """A dense, row-major, contiguous array a kernel reads or writes.

    role is 'input' (never written), 'output' (returned to the caller) or 'temp' (lives only
    while the program runs; the native entry allocates it).
    """

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    role: str = "input"

    def __post_init__(self):
        object.__setattr__(self, "dtype", as_dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.role not in ("input", "output", "temp"):
            raise KirError(
                f"buffer {self.name!r}: role must be input, output or temp, not {self.role!r}"
            )
        if any(d < 0 for d in self.shape):
            raise KirError(f"buffer {self.name!r} has a negative dimension: {self.shape}")

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        """Row-major strides in elements (not bytes)."""
        return row_major_strides(self.shape)

    def index(self, *indices) -> "Expr":
        """The flat element index of a multi-index (each an Expr or int)."""
        if len(indices) != len(self.shape):
            raise KirError(
                f"buffer {self.name!r} of rank {len(self.shape)} indexed with "
                f"{len(indices)} indices"
            )
        return affine(zip(indices, self.strides))

    def __getitem__(self, indices) -> "Load":
        """buf[i, j] loads element (i, j); buf[()] loads a rank-0 buffer."""
        if not isinstance(indices, tuple):
            indices = (indices,)
        return Load(self, self.index(*indices))

    def __str__(self) -> str:
        return f"{self.name}: {short_name(self.dtype)}[{','.join(map(str, self.shape))}]"


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a dense row-major array of this shape."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


# ---------------------------------------------------------------------------------------------
# Scalar expressions: immutable, hash-consed, so equal subtrees are one shared object and
# identity is equality (a dict keyed by nodes is a CSE table).

_INTERNED: "weakref.WeakValueDictionary[tuple, Expr]" = weakref.WeakValueDictionary()
_INTERN_LOCK = threading.Lock()
#: The weak references behind _INTERNED (read directly on the lock-free path).
_INTERNED_REFS = _INTERNED.data


def _intern(cls, key: tuple, **fields) -> "Expr":
    # Most nodes exist already: look without the lock first (a dict read is atomic), then
    # look again under the lock before making one, so that two threads never make two.
    ref = _INTERNED_REFS.get((cls, key))
    node = ref() if ref is not None else None
    if node is not None:
        return node
    with _INTERN_LOCK:
        node = _INTERNED.get((cls, key))
        if node is None:
            node = object.__new__(cls)
            for name, value in fields.items():
                object.__setattr__(node, name, value)
            _INTERNED[(cls, key)] = node
    return node


class Expr:
    """Base of scalar expression nodes; every node has a dtype and child expressions."""

    __slots__ = ("dtype", "__weakref__")

    def __setattr__(self, name, value):
        raise AttributeError("kernel IR expressions are immutable")

    def children(self) -> tuple["Expr", ...]:
        return ()

    def __repr__(self) -> str:
        from kiln.compiler.kir_print import format_expr

        return f"<{type(self).__name__} {format_expr(self)}: {short_name(self.dtype)}>"

    # Operator sugar for hand-written kernels. Python scalars take the other operand's dtype.
    # == and != are deliberately not overloaded: nodes are dict keys compared by identity.
    def __add__(self, other):
        return op(ScalarOp.ADD, self, lift(other, self))

    def __radd__(self, other):
        return op(ScalarOp.ADD, lift(other, self), self)

    def __sub__(self, other):
        return op(ScalarOp.SUB, self, lift(other, self))

    def __rsub__(self, other):
        return op(ScalarOp.SUB, lift(other, self), self)

    def __mul__(self, other):
        return op(ScalarOp.MUL, self, lift(other, self))

    def __rmul__(self, other):
        return op(ScalarOp.MUL, lift(other, self), self)

    def __truediv__(self, other):
        return op(ScalarOp.DIV, self, lift(other, self))

    def __rtruediv__(self, other):
        return op(ScalarOp.DIV, lift(other, self), self)

    def __mod__(self, other):
        return op(ScalarOp.REM, self, lift(other, self))

    def __neg__(self):
        return op(ScalarOp.NEG, self)

    def __lt__(self, other):
        return op(ScalarOp.LT, self, lift(other, self))

    def __le__(self, other):
        return op(ScalarOp.LE, self, lift(other, self))

    def __gt__(self, other):
        return op(ScalarOp.GT, self, lift(other, self))

    def __ge__(self, other):
        return op(ScalarOp.GE, self, lift(other, self))

    def __and__(self, other):
        return op(_bitwise_or_logical(self, "AND"), self, lift(other, self))

    def __or__(self, other):
        return op(_bitwise_or_logical(self, "OR"), self, lift(other, self))

    def __xor__(self, other):
        return op(_bitwise_or_logical(self, "XOR"), self, lift(other, self))

    def __invert__(self):
        return op(_bitwise_or_logical(self, "NOT"), self)

    def __lshift__(self, other):
        return op(ScalarOp.SHIFT_LEFT, self, lift(other, self))

    def __rshift__(self, other):
        shift = (
            ScalarOp.SHIFT_RIGHT_ARITHMETIC
            if dtype_family(self.dtype) == "sint"
            else ScalarOp.SHIFT_RIGHT_LOGICAL
        )
        return op(shift, self, lift(other, self))

    __hash__ = object.__hash__


def _bitwise_or_logical(expr: Expr, name: str) -> ScalarOp:
    prefix = "LOGICAL_" if expr.dtype == BOOL else "BITWISE_"
    return ScalarOp[prefix + name]


def _const_key(value, dtype: np.dtype):
    if isinstance(value, float) and math.isnan(value):
        return (dtype, "nan")
    if isinstance(value, float):
        return (dtype, value, math.copysign(1.0, value))  # keeps -0.0 apart from 0.0
    return (dtype, value)


_FLOAT32 = struct.Struct("<f")
#: dtype -> (min, max) of an integer dtype (np.iinfo is slow to build, and constants are many)
_INTEGER_BOUNDS: dict = {}


def _normalize_const(value, dtype: np.dtype):
    family = dtype_family(dtype)
    if family == "bool":
        return bool(value)
    if family == "float":
        if dtype == np.float64:
            return float(value)
        if dtype == np.float32:
            try:  # (struct rounds to nearest like NumPy; out of range it raises)
                return _FLOAT32.unpack(_FLOAT32.pack(value))[0]
            except (OverflowError, struct.error):
                pass
        # Round to the dtype (f16/bf16/f32) so the node holds exactly the value it denotes.
        with np.errstate(over="ignore"):
            return float(np.asarray(value, dtype=np.float64).astype(dtype))
    if isinstance(value, float) and not value.is_integer():
        raise KirError(f"constant {value!r} is not an integer but the dtype is {dtype}")
    integer = int(value)
    bounds = _INTEGER_BOUNDS.get(dtype)
    if bounds is None:
        info = np.iinfo(dtype)
        bounds = _INTEGER_BOUNDS[dtype] = (int(info.min), int(info.max))
    if not bounds[0] <= integer <= bounds[1]:
        raise KirError(f"constant {integer} does not fit {dtype} [{bounds[0]}, {bounds[1]}]")
    return integer


class Const(Expr):
    """A literal of a given dtype (value stored as a Python bool/int/float, already rounded)."""

    __slots__ = ("value",)

    def __new__(cls, value, dtype) -> "Const":
        if type(value) is int and dtype is INDEX:  # (most constants: index arithmetic's)
            node = _INDEX_CONSTS.get(value)
            if node is not None:
                return node
        dtype = as_dtype(dtype)
        if isinstance(value, np.generic):
            value = value.item()
        value = _normalize_const(value, dtype)
        node = _intern(cls, _const_key(value, dtype), dtype=dtype, value=value)
        if dtype is INDEX and type(value) is int:
            if len(_INDEX_CONSTS) >= _INDEX_CONSTS_MAX:
                _INDEX_CONSTS.clear()
            _INDEX_CONSTS[value] = node
        return node


#: Index constants by value, the interned nodes held (a fast path: index arithmetic builds
#: thousands of them while a program is planned), cleared when it grows past its bound.
_INDEX_CONSTS: dict[int, Const] = {}
_INDEX_CONSTS_MAX = 1 << 14


class Var(Expr):
    """A loop index variable (int64), bound by a Loop statement or a Reduce expression."""

    __slots__ = ("name",)

    def __new__(cls, name: str) -> "Var":
        if not name.isidentifier():
            raise KirError(f"loop variable name {name!r} is not an identifier")
        return _intern(cls, (name,), dtype=INDEX, name=name)


class Load(Expr):
    """Element `index` (a flat int64 element index) of `buffer`."""

    __slots__ = ("buffer", "index")

    def __new__(cls, buffer: Buffer, index) -> "Load":
        if not isinstance(buffer, Buffer):
            raise KirError(f"Load needs a Buffer, got {type(buffer).__name__}")
        index = as_index(index)
        return _intern(cls, (buffer, index), dtype=buffer.dtype, buffer=buffer, index=index)

    def children(self):
        return (self.index,)


class Op(Expr):
    """A ScalarOp applied to operands. nsw marks index arithmetic that never wraps (int64 only):
    only the index helpers set it, since user integer arithmetic must wrap like NumPy's."""

    __slots__ = ("op", "args", "nsw")

    def __new__(cls, op: ScalarOp, args: Sequence[Expr], dtype=None, nsw: bool = False) -> "Op":
        args = tuple(args)
        for arg in args:
            if not isinstance(arg, Expr):
                raise KirError(
                    f"{op.value}: operand {arg!r} is not an Expr; wrap literals in "
                    f"Const(value, dtype)"
                )
        signature = (op, tuple(a.dtype for a in args), dtype)
        result = _CHECKED_OPS.get(signature)
        if result is None:
            result = _CHECKED_OPS[signature] = check_op(op, signature[1], dtype)
        if nsw and result != INDEX:
            raise KirError("nsw (no signed wrap) only applies to int64 index arithmetic")
        return _intern(cls, (op, args, result, nsw), dtype=result, op=op, args=args, nsw=bool(nsw))

    def children(self):
        return self.args


#: check_op's result by (op, operand dtypes, requested dtype): a signature checked once.
_CHECKED_OPS: dict = {}


class ReduceKind(enum.Enum):
    """The combiners a Reduce may carry. ARGMAX/ARGMIN carry a (value, index) pair and yield
    the index of the first extreme element (NaN counts as the extreme, like np.argmax)."""

    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    AND = "and"
    OR = "or"
    XOR = "xor"
    ARGMAX = "argmax"
    ARGMIN = "argmin"


ARG_REDUCTIONS = frozenset({ReduceKind.ARGMAX, ReduceKind.ARGMIN})

#: The binary ScalarOp each plain reduction folds with (also used by `accumulate`).
REDUCE_COMBINER = {
    ReduceKind.SUM: ScalarOp.ADD,
    ReduceKind.PROD: ScalarOp.MUL,
    ReduceKind.MAX: ScalarOp.MAX,
    ReduceKind.MIN: ScalarOp.MIN,
    ReduceKind.AND: ScalarOp.BITWISE_AND,
    ReduceKind.OR: ScalarOp.BITWISE_OR,
    ReduceKind.XOR: ScalarOp.BITWISE_XOR,
}

_REDUCE_FAMILIES = {
    ReduceKind.SUM: NUMERIC_FAMILIES,
    ReduceKind.PROD: NUMERIC_FAMILIES,
    ReduceKind.MAX: ALL_FAMILIES,
    ReduceKind.MIN: ALL_FAMILIES,
    ReduceKind.AND: INT_OR_BOOL_FAMILIES,
    ReduceKind.OR: INT_OR_BOOL_FAMILIES,
    ReduceKind.XOR: INT_OR_BOOL_FAMILIES,
    ReduceKind.ARGMAX: ALL_FAMILIES,
    ReduceKind.ARGMIN: ALL_FAMILIES,
}


def reduce_identity(kind: ReduceKind, dtype: np.dtype):
    """The neutral element of a plain reduction for a dtype, as a Python scalar."""
    family = dtype_family(dtype)
    if family == "float":
        lowest, highest = -math.inf, math.inf
    elif family == "bool":
        lowest, highest = False, True
    else:
        lowest, highest = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    all_ones = True if family == "bool" else (-1 if family == "sint" else highest)
    table = {
        ReduceKind.SUM: 0,
        ReduceKind.PROD: 1,
        ReduceKind.MAX: lowest,
        ReduceKind.MIN: highest,
        ReduceKind.AND: all_ones,
        ReduceKind.OR: 0,
        ReduceKind.XOR: 0,
    }
    return table[kind]


class Reduce(Expr):
    """A reduction loop used as a value: folds `value` over var in [start, stop) into an
    accumulator that starts at `init` (default: the combiner's identity).

    Narrow floats (f16, bf16) accumulate in float32 and round once at the end. For ARGMAX and
    ARGMIN the node denotes the winning `index` (default: var itself, cast to index_dtype);
    ArgValue(node) denotes the winning value. The emitter computes the loop once per scope no
    matter how many statements use it, so one reduction can feed several outputs.
    """

    __slots__ = ("kind", "var", "start", "stop", "value", "init", "index")

    def __new__(
        cls,
        kind: ReduceKind,
        var: Var,
        start,
        stop,
        value: Expr,
        *,
        init=None,
        index=None,
        index_dtype=None,
    ) -> "Reduce":
        if not isinstance(var, Var):
            raise KirError(f"reduce variable must be a Var, got {var!r}")
        start, stop = as_index(start), as_index(stop)
        family = dtype_family(value.dtype)
        if family not in _REDUCE_FAMILIES[kind]:
            raise TypeError(f"{kind.value} reduction is not defined on {short_name(value.dtype)}")
        if kind in ARG_REDUCTIONS:
            if init is not None:
                raise KirError(f"{kind.value} takes no init: the first element seeds it")
            index = cast(var if index is None else index, index_dtype or INDEX)
            if dtype_family(index.dtype) not in INT_FAMILIES:
                raise TypeError(f"{kind.value} index must be an integer, not {index.dtype}")
            dtype = index.dtype
        else:
            if index is not None or index_dtype is not None:
                raise KirError("only argmax/argmin take an index")
            if init is None:
                init = Const(reduce_identity(kind, value.dtype), value.dtype)
            init = lift(init, value)
            if init.dtype != value.dtype:
                raise TypeError(
                    f"reduction init is {short_name(init.dtype)} but the values are "
                    f"{short_name(value.dtype)}"
                )
            dtype = value.dtype
        key = (kind, var, start, stop, value, init, index)
        return _intern(
            cls,
            key,
            dtype=dtype,
            kind=kind,
            var=var,
            start=start,
            stop=stop,
            value=value,
            init=init,
            index=index,
        )

    def children(self):
        extra = (self.init,) if self.init is not None else (self.index,)
        return (self.start, self.stop, self.value) + extra


class ArgValue(Expr):
    """The winning value of an ARGMAX/ARGMIN Reduce (its node denotes the index)."""

    __slots__ = ("reduce",)

    def __new__(cls, reduce: Reduce) -> "ArgValue":
        if not isinstance(reduce, Reduce) or reduce.kind not in ARG_REDUCTIONS:
            raise KirError("ArgValue needs an argmax/argmin Reduce")
        return _intern(cls, (reduce,), dtype=reduce.value.dtype, reduce=reduce)

    def children(self):
        return (self.reduce,)


# ---------------------------------------------------------------------------------------------
# Expression builders


def lift(value, like: Expr) -> Expr:
    """An Expr as is; a Python/NumPy scalar as a Const of `like`'s dtype (weak typing)."""
    if isinstance(value, Expr):
        return value
    return Const(value, like.dtype)


def const(value, dtype) -> Const:
    """A literal of `dtype`."""
    return Const(value, dtype)


def op(scalar_op: ScalarOp, *args: Expr, dtype=None) -> Op:
    """Apply `scalar_op`; the result dtype follows OP_SPECS (cast needs `dtype`)."""
    return Op(scalar_op, args, dtype)


def cast(x: Expr, dtype) -> Expr:
    """Convert x to dtype (saturating float->int, NaN->0; float->bool is x != 0)."""
    dtype = as_dtype(dtype)
    if x.dtype == dtype:
        return x
    if isinstance(x, Const) and dtype_family(x.dtype) != "float" and dtype_family(dtype) != "float":
        info = None if dtype == BOOL else np.iinfo(dtype)
        if info is None or info.min <= x.value <= info.max:
            return Const(bool(x.value) if dtype == BOOL else int(x.value), dtype)
    return Op(ScalarOp.CAST, (x,), dtype)


def select(cond: Expr, on_true, on_false) -> Expr:
    """cond ? on_true : on_false (both sides are evaluated; nothing traps)."""
    like = on_true if isinstance(on_true, Expr) else on_false
    on_true, on_false = lift(on_true, like), lift(on_false, like)
    if on_true is on_false:
        return on_true
    return Op(ScalarOp.SELECT, (cond, on_true, on_false))


def accumulate(buffer: Buffer, index, value: Expr, kind: ReduceKind = ReduceKind.SUM) -> "Store":
    """buffer[index] = buffer[index] (+, *, max, ...) value: the statement form of a reduction,
    for column reductions whose accumulator row lives in the output buffer."""
    target = Store(buffer, index, value)
    combined = op(REDUCE_COMBINER[kind], Load(buffer, target.index), target.value)
    return Store(buffer, target.index, combined)


# --- index arithmetic: int64, never wraps, folded as it is built so printed indices stay short


def as_index(value) -> Expr:
    """An int, or an integer Expr, as an int64 index expression."""
    if isinstance(value, Expr):
        if value.dtype is INDEX or value.dtype == INDEX:
            return value
        if dtype_family(value.dtype) in INT_FAMILIES or value.dtype == BOOL:
            return cast(value, INDEX)
        raise TypeError(f"an index must be an integer, got a {short_name(value.dtype)} value")
    if type(value) is int:
        return Const(value, INDEX)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"an index must be an int or an integer Expr, got {value!r}")
    return Const(int(value), INDEX)


def _index_const(x: Expr):
    return x.value if isinstance(x, Const) else None


def index_add(a, b) -> Expr:
    """a + b on int64 indices (nsw), with constants folded."""
    a, b = as_index(a), as_index(b)
    ca, cb = _index_const(a), _index_const(b)
    if ca is not None and cb is not None:
        return Const(ca + cb, INDEX)
    if ca == 0:
        return b
    if cb == 0:
        return a
    if cb is not None and cb < 0:
        return Op(ScalarOp.SUB, (a, Const(-cb, INDEX)), nsw=True)
    return Op(ScalarOp.ADD, (a, b), nsw=True)


def index_sub(a, b) -> Expr:
    """a - b on int64 indices (nsw), with constants folded."""
    b = as_index(b)
    cb = _index_const(b)
    if cb is not None:
        return index_add(a, -cb)
    a = as_index(a)
    return Op(ScalarOp.SUB, (a, b), nsw=True)


def index_mul(a, b) -> Expr:
    """a * b on int64 indices (nsw), with constants folded."""
    a, b = as_index(a), as_index(b)
    ca, cb = _index_const(a), _index_const(b)
    if ca is not None and cb is not None:
        return Const(ca * cb, INDEX)
    if ca is not None:
        a, b, ca, cb = b, a, cb, ca
    if cb == 0:
        return Const(0, INDEX)
    if cb == 1:
        return a
    return Op(ScalarOp.MUL, (a, b), nsw=True)


def index_div(a, b) -> Expr:
    """a // b for non-negative indices and positive b (C division), folded for constants."""
    a, b = as_index(a), as_index(b)
    if _index_const(b) == 1:
        return a
    if _index_const(a) is not None and _index_const(b):
        return Const(_c_divmod(a.value, b.value)[0], INDEX)
    return Op(ScalarOp.DIV, (a, b))


def index_rem(a, b) -> Expr:
    """a % b for non-negative indices and positive b, folded for constants."""
    a, b = as_index(a), as_index(b)
    if _index_const(b) == 1:
        return Const(0, INDEX)
    if _index_const(a) is not None and _index_const(b):
        return Const(_c_divmod(a.value, b.value)[1], INDEX)
    return Op(ScalarOp.REM, (a, b))


def _c_divmod(a: int, b: int) -> tuple[int, int]:
    """Quotient truncated toward zero and remainder with the dividend's sign (C semantics)."""
    quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return quotient, a - quotient * b


def index_min(a, b) -> Expr:
    a, b = as_index(a), as_index(b)
    if _index_const(a) is not None and _index_const(b) is not None:
        return Const(min(a.value, b.value), INDEX)
    return Op(ScalarOp.MIN, (a, b))


def index_max(a, b) -> Expr:
    a, b = as_index(a), as_index(b)
    if _index_const(a) is not None and _index_const(b) is not None:
        return Const(max(a.value, b.value), INDEX)
    return Op(ScalarOp.MAX, (a, b))


def clamp(x, lo, hi) -> Expr:
    """min(max(x, lo), hi) on indices: how gathers and dynamic slices keep loads in bounds."""
    return index_min(index_max(x, lo), hi)


def affine(terms: Iterable[tuple[object, int]], offset: int = 0) -> Expr:
    """sum(index_k * stride_k) + offset, skipping zero strides and folding constants."""
    total: Expr = Const(0, INDEX)
    for index, stride in terms:
        total = index_add(total, index_mul(index, stride))
    return index_add(total, offset)


def flat_index(shape: Sequence[int], indices: Sequence) -> Expr:
    """Row-major flat index of a multi-index into an array of `shape`."""
    if len(shape) != len(indices):
        raise KirError(f"{len(indices)} indices for a rank-{len(shape)} shape")
    return affine(zip(indices, row_major_strides(shape)))


def unravel(flat, shape: Sequence[int]) -> tuple[Expr, ...]:
    """Multi-index of a row-major flat index (div/rem chain), the inverse of flat_index:
    how a reshape reads its operand inside a loop over the result's shape."""
    out = []
    for stride in row_major_strides(shape):
        out.append(index_div(flat, stride))
        flat = index_rem(flat, stride)
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Traversal


def region_children(node: Expr) -> tuple[Expr, ...]:
    """A node's children, except a reduction's body (value, index): those are evaluated inside
    the reduction loop, a scope of their own."""
    if isinstance(node, Reduce):
        return (node.start, node.stop) + ((node.init,) if node.init is not None else ())
    return node.children()


def toposort_region(roots: Iterable[Expr]) -> list[Expr]:
    """Like toposort, but stops at reduction bodies (see region_children)."""
    return toposort(roots, region_children)


def toposort(
    roots: Iterable[Expr],
    children: Callable[[Expr], tuple[Expr, ...]] | None = None,
    skip: Container[Expr] = (),
) -> list[Expr]:
    """Every node reachable from roots, children before parents (iterative: DAGs can be deep):
    a depth-first post-order, children in their order.

    Nodes in `skip` (e.g. already analysed ones) are left out along with what lies below them.
    """
    order: list[Expr] = []
    seen: set[int] = set()
    for root in roots:
        if id(root) in seen or root in skip:
            continue
        seen.add(id(root))
        stack = [(root, iter(children(root) if children else root.children()))]
        while stack:
            node, pending = stack[-1]
            for child in pending:
                if id(child) not in seen and child not in skip:
                    seen.add(id(child))
                    stack.append((child, iter(children(child) if children else child.children())))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


# Statements, kernels and programs live in kir_stmts (they import this module's nodes); they
# are re-exported so that `kir` stays the one import kernel builders need.
from kiln.compiler.kir_stmts import (  # noqa: E402
    Stmt,
    Store,
    Loop,
    If,
    MatMul,
    loop_nest,
    walk_stmts,
    stmt_exprs,
    buffers_of,
    stored_buffers,
    Kernel,
    Program,
    verify_kernel,
    verify_program,
)
