"""The keys of kiln.random: typed keys (PRNGKeyArray) and raw uint32[2] keys, their checks,
seeding, splitting and folding, and raw bits. Re-exported by kiln.random."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from kiln import lax
from kiln import numpy as jnp
from kiln.core import dtypes
from kiln.core.array import Array
from kiln.core.shapes import canonicalize_shape
from kiln.core.trace import Tracer
from kiln.primitives.random_bits import (
    threefry_fold_in,
    threefry_random_bits,
    threefry_split,
)


_UINT32 = np.dtype(np.uint32)
_UINT_DTYPES = {
    8: np.dtype(np.uint8),
    16: np.dtype(np.uint16),
    32: np.dtype(np.uint32),
    64: np.dtype(np.uint64),
}
_IMPL_NAME = "threefry2x32"


# --- typed keys --------------------------------------------------------------------------------


class _KeyDType:
    """The dtype of typed keys; prints as JAX's `key<fry>`."""

    name = "key<fry>"

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        return isinstance(other, _KeyDType) or other == self.name

    def __hash__(self) -> int:
        return hash(self.name)


KEY_DTYPE = _KeyDType()


class PRNGKeyArray:
    """An array of typed PRNG keys (from `key`, `wrap_key_data`, or `split` of a typed key).

    It wraps the uint32 key words (trailing dimension 2); its shape leaves that dimension out.
    It is a pytree whose one leaf is the key data, so it passes through jit and make_jaxpr."""

    __slots__ = ("_base",)

    def __init__(self, base) -> None:
        self._base = base

    @property
    def shape(self) -> tuple:
        return tuple(self._base.shape[:-1])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype(self) -> _KeyDType:
        return KEY_DTYPE

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d key array")
        return (PRNGKeyArray(self._base[i]) for i in range(self.shape[0]))

    def __getitem__(self, index) -> "PRNGKeyArray":
        index = index if isinstance(index, tuple) else (index,)
        if any(i is Ellipsis for i in index):
            raise NotImplementedError(
                "Ellipsis indexing of key arrays is not supported; "
                "index the leading dimensions explicitly."
            )
        if len([i for i in index if i is not None]) > self.ndim:
            raise IndexError(f"Too many indices for a key array of shape {self.shape}.")
        return PRNGKeyArray(self._base[index])

    def __eq__(self, other):
        if not isinstance(other, PRNGKeyArray):
            return NotImplemented
        return jnp.all(jnp.equal(self._base, other._base), axis=-1)

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else jnp.logical_not(equal)

    __hash__ = None  # unhashable, like arrays: == compares elementwise

    def __repr__(self) -> str:
        if isinstance(self._base, Tracer):
            return f"PRNGKeyArray(shape={self.shape}, dtype={KEY_DTYPE}) tracing {self._base}"
        return f"Array({self.shape}, dtype={KEY_DTYPE}) overlaying:\n{np.asarray(self._base)}"

    __str__ = __repr__


def _register_key_pytree() -> None:
    from kiln import tree_util

    tree_util.register_pytree_node(
        PRNGKeyArray,
        lambda k: ((k._base,), None),
        lambda _, children: PRNGKeyArray(tuple(children)[0]),
    )


_register_key_pytree()


def _check_key(name: str, key: Any, allow_batched: bool = False):
    """The uint32[..., 2] words of `key` and whether it was a typed key; clear errors for
    anything else."""
    if isinstance(key, PRNGKeyArray):
        data, typed = key._base, True
    elif isinstance(key, (Array, Tracer, np.ndarray)):
        data, typed = key, False
        dtype = np.dtype(key.dtype)
        if dtype != _UINT32:
            raise TypeError(
                f"{name} expects a PRNG key: a uint32 array whose last dimension "
                f"is 2 (from kiln.random.PRNGKey, split or fold_in); got an "
                f"array of dtype {dtype.name}."
            )
        if key.ndim == 0 or key.shape[-1] != 2:
            raise TypeError(
                f"{name} expects a PRNG key: a uint32 array whose last dimension "
                f"is 2 (from kiln.random.PRNGKey, split or fold_in); got shape "
                f"{tuple(key.shape)}."
            )
        if isinstance(key, np.ndarray):
            data = Array(key)
    elif isinstance(key, (list, tuple)):
        raise TypeError(
            f"unexpected PRNG key type {type(key)}: {name} expects a key array "
            "from kiln.random.PRNGKey or kiln.random.key."
        )
    else:
        raise TypeError(
            f"{name} expects a PRNG key (from kiln.random.PRNGKey or "
            f"kiln.random.key); got {key!r} of type {type(key).__name__}."
        )
    if not allow_batched and data.ndim > 1:
        shape = tuple(data.shape[:-1]) if typed else tuple(data.shape)
        raise ValueError(
            f"{name} accepts a single key, but was given a key array of shape "
            f"{shape} != (). Use jax.vmap for batching."
        )
    return data, typed


def _wrap_result(data, typed: bool):
    return PRNGKeyArray(data) if typed else data


# --- seeding, splitting, folding -----------------------------------------------------------------


def _seed_words(seed, ctor_name: str):
    """uint32[2] key data from an integer seed: the high and low 32-bit words of the seed
    (with x64 off, integer seeds are 32-bit first, so the high word is 0)."""
    if isinstance(seed, PRNGKeyArray):
        raise TypeError(f"{ctor_name} accepts a scalar seed, but was given a PRNG key.")
    if np.ndim(seed) if not isinstance(seed, (Array, Tracer)) else seed.ndim:
        raise TypeError(
            f"{ctor_name} accepts a scalar seed, but was given an array of shape "
            f"{tuple(np.shape(seed))} != (). Use jax.vmap for batching"
        )
    if isinstance(seed, (int, np.integer)):
        if isinstance(seed, int):
            # As JAX: a Python int is taken as int64 first (so 2**63 and beyond overflow).
            seed = np.int64(seed)
        dtype = dtypes.canonicalize(np.asarray(seed).dtype)
        value = int(np.asarray(seed).astype(dtype))
        high = (value >> 32) & 0xFFFFFFFF if dtype.itemsize == 8 else 0
        return Array._wrap(np.array([high, value & 0xFFFFFFFF], _UINT32), False)
    if isinstance(seed, (Array, Tracer)):
        dtype = np.dtype(seed.dtype)
    else:
        dtype = np.asarray(seed).dtype
    if dtype.kind not in "iu":
        raise TypeError(f"PRNG key seed must be an integer; got {seed!r} of dtype {dtype.name}.")
    seed = jnp.asarray(seed)
    low = lax.convert_element_type(seed, _UINT32)
    if seed.dtype.itemsize == 8:
        high = lax.convert_element_type(lax.shift_right_logical(seed, 32), _UINT32)
    else:
        high = lax.full((), 0, _UINT32)
    return lax.concatenate([lax.reshape(high, (1,)), lax.reshape(low, (1,))], 0)


def PRNGKey(seed, *, impl=None):
    """A legacy raw key, uint32[2], from an integer seed (a Python int, NumPy or kiln integer
    scalar; traced seeds work too)."""
    _check_impl(impl)
    return _seed_words(seed, "PRNGKey")


def key(seed, *, impl=None):
    """A typed scalar key (dtype key<fry>) from an integer seed."""
    _check_impl(impl)
    return PRNGKeyArray(_seed_words(seed, "key"))


def _check_impl(impl) -> None:
    if impl is not None and impl not in (_IMPL_NAME, "fry"):
        raise ValueError(f"kiln.random implements only the threefry2x32 PRNG, got impl={impl!r}.")


def key_data(keys):
    """The uint32 words underlying typed keys (raw keys are returned as they are)."""
    data, _ = _check_key("key_data", keys, allow_batched=True)
    return data


def wrap_key_data(key_bits_array, *, impl=None):
    """Typed keys from uint32 key words whose trailing dimension is 2."""
    _check_impl(impl)
    if isinstance(key_bits_array, PRNGKeyArray):
        raise TypeError("wrap_key_data expects uint32 key data, but was given typed keys.")
    data, _ = _check_key("wrap_key_data", key_bits_array, allow_batched=True)
    return PRNGKeyArray(data)


def key_impl(keys) -> str:
    """The name of the PRNG implementation behind `keys` (always 'threefry2x32')."""
    _check_key("key_impl", keys, allow_batched=True)
    return _IMPL_NAME


def clone(key):
    """The same key (JAX's `clone` exists for stateful key handling; kiln keys are values)."""
    return key


def split(key, num: int | Sequence[int] = 2):
    """`num` new keys (an int, or a shape of keys) derived from `key`, stacked on a new
    leading axis: raw keys give uint32[num, 2], typed keys a key array of shape (num,)."""
    data, typed = _check_key("split", key)
    shape = tuple(num) if isinstance(num, Sequence) else (num,)
    shape = canonicalize_shape(shape, "split: ")
    return _wrap_result(threefry_split(data, shape), typed)


def fold_in(key, data):
    """A new key that depends on `key` and the 32-bit integer `data` (e.g. a step count)."""
    words, typed = _check_key("fold_in", key)
    if np.ndim(data) if not isinstance(data, (Array, Tracer)) else data.ndim:
        raise TypeError(
            "fold_in accepts a scalar, but was given an array of shape "
            f"{tuple(np.shape(data))} != (). Use jax.vmap for batching."
        )
    if isinstance(data, (int, np.integer)) and not isinstance(data, bool):
        if not 0 <= int(data) <= 0xFFFFFFFF:
            raise OverflowError(f"Python integer {int(data)} out of bounds for uint32")
    value = lax.convert_element_type(data, _UINT32)
    return _wrap_result(threefry_fold_in(words, value), typed)


# --- raw bits ----------------------------------------------------------------------------------


def bits(key, shape: Sequence[int] = (), dtype=None):
    """Uniform random bits as unsigned integers (default uint32, or uint64 with x64 on)."""
    data, _ = _check_key("bits", key)
    dtype = dtypes.default_uint() if dtype is None else dtypes.canonicalize(dtype)
    if dtype.kind != "u":
        raise ValueError(
            f"dtype argument to `bits` must be an unsigned int dtype, got {dtype.name}"
        )
    shape = canonicalize_shape(shape)
    return threefry_random_bits(data, dtype.itemsize * 8, shape)
