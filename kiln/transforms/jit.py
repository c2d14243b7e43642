"""kiln.jit: trace a function once per input signature, optimize and compile the jaxpr, cache
the executable, and run it on later calls with as little Python as possible.

At top level a call flattens its arguments, builds the signature key from each leaf's
(shape, dtype, weak_type) and looks it up in the function's entry table (kiln.runtime.cache);
a hit runs the executable directly. Under an outer trace (make_jaxpr, an enclosing jit, grad)
the function is staged as one `pjit` equation calling its traced jaxpr (the primitive lives in
kiln/primitives/pjit.py; this module installs the compiler its eager impl runs through).
Argument signatures live in jit_signature.py, Lowered and Compiled in jit_compiled.py.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import time
import types
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import optree

from kiln import api_util
from kiln.api import ShapeDtypeStruct
from kiln.config import config as _config
from kiln.core import debug_checks, dtypes
from kiln.core.array import Array
from kiln.core.avals import ShapedArray, get_aval
from kiln.core.jaxpr import ClosedJaxpr, Jaxpr
from kiln.core.trace import Tracer, current_trace_state, leaked_tracer_error
from kiln.primitives.pjit import pjit_p, set_executable_builder
from kiln.runtime import cache, eager_kernels
from kiln.transforms import jit_options
from kiln.transforms.jit_compiled import (  # noqa: F401  (re-exported: moved to jit_compiled.py)
    Compiled,
    Lowered,
)
from kiln.transforms.jit_signature import (  # noqa: F401  (re-exported: moved to jit_signature.py)
    _SCALAR_SIGNATURES,
    _VALID_LEAF,
    _leaf_signature,
    _c_flatten,
    _flatten_args,
    _tree_key,
    _flat_signature,
    _aval_signature,
    _to_array,
    _convert_leaves,
    execute_leaves,
    _short,
    _format_signature,
    _signature_str,
    _canonical,
)
from kiln.transforms.staging import DebugInfo, function_name, function_source, trace_to_jaxpr

__all__ = ["jit", "Lowered", "Compiled", "StaleCaptureWarning", "RecompilationWarning"]

logger = logging.getLogger("kiln")
_NAMESPACE = api_util.NAMESPACE
_tree_flatten = optree.tree_flatten
_tree_unflatten = optree.tree_unflatten
_trace_state = current_trace_state
_clock = cache._clock
_stats = cache.stats
_intern_signature = cache.intern_signature

#: After this many compilations of one function, warn (once) about recompilation.
RECOMPILE_WARNING_THRESHOLD = 10


class StaleCaptureWarning(UserWarning):
    """A global or closure variable a jitted function captured was rebound after tracing."""


class RecompilationWarning(UserWarning):
    """A jitted function keeps being compiled for new signatures."""


# --- compiling the jaxpr of an eager pjit call ---------------------------------------------------


def _executable_for_jaxpr(jaxpr: ClosedJaxpr, name: str):
    """Compile a staged jaxpr through the compile cache, keyed by the jaxpr's identity (the
    key holds the jaxpr, so its id cannot be reused while the entry lives)."""
    from kiln.compiler import pipeline

    backend = pipeline.resolve_backend(None)
    fc = cache.function_cache(("pjit", cache.Identity(jaxpr), backend), name, None)
    entry = fc.entries.get(())
    if entry is None or entry.executable is None:

        def trace() -> cache.Traced:
            out_tree = optree.tree_structure(
                tuple(range(len(jaxpr.out_avals))), namespace=_NAMESPACE
            )
            return cache.Traced(jaxpr, out_tree, tuple(jaxpr.in_avals), [], [], (), 0.0)

        def compile_traced(traced: cache.Traced):
            return pipeline.compile(pipeline.optimize(jaxpr, name), backend, name)

        entry = cache.lookup_or_build(fc, (), trace, compile_traced)
    else:
        entry.stamp = next(_clock)
        _stats.hits += 1
    return entry.executable


set_executable_builder(_executable_for_jaxpr)
debug_checks.register_call_primitive(pjit_p)  # a NaN found eagerly is traced into the jaxpr
# Large eager elementwise ops run compiled kernels too (compiled on first use).
eager_kernels.install()


# --- jit ---------------------------------------------------------------------------------------


def jit(
    fun: Callable | None = None,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Sequence[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Sequence[str] | None = None,
    backend: str | None = None,
    on_stale_capture: str = "warn",
) -> "JitWrapped":
    """Compile `fun`: trace it once per input signature, optimize, cache and run the result.

    Args:
      fun: the function; arguments are pytrees of arrays and scalars.
      static_argnums / static_argnames: arguments passed as Python values (hashable); each
        new value compiles again.
      donate_argnums / donate_argnames: arguments whose buffers an output of the same shape
        and dtype may take; a call that takes one deletes the argument's Array (later use
        raises RuntimeError), as in JAX.
      backend: "cpu" (the configured default), "native" or "interpreter".
      on_stale_capture: what calling this jitted object again does when a global, closure
        variable or attribute its trace read has been rebound since: "warn" (once, keeping
        the traced value, as JAX does), "retrace", or "ignore". A *new* jitted object never
        reuses such a trace: it traces again with the current values.
    Returns:
      The wrapped function (also has .lower(), .clear_cache(), ._cache_size()).
    """
    options = dict(
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        donate_argnames=donate_argnames,
        backend=backend,
        on_stale_capture=on_stale_capture,
    )
    if fun is None:
        return functools.partial(jit, **options)
    return JitWrapped(fun, **options)


class JitWrapped:
    """A jitted function. Calling it runs the cached executable for the arguments' signature,
    tracing and compiling first on a miss."""

    def __init__(
        self,
        fun: Callable,
        static_argnums,
        static_argnames,
        donate_argnums,
        donate_argnames,
        backend,
        on_stale_capture,
    ):
        if not callable(fun):
            raise TypeError(f"jit expected a callable, got {fun!r} of type {type(fun).__name__}")
        if on_stale_capture not in ("warn", "retrace", "ignore"):
            raise ValueError(
                f"on_stale_capture must be 'warn', 'retrace' or 'ignore', got {on_stale_capture!r}"
            )
        functools.update_wrapper(self, fun)
        if backend is not None:
            from kiln.compiler import pipeline

            pipeline.resolve_backend(backend)  # unknown names fail here, not at first call
        self._fun = fun
        # kiln's own jitted library functions (kiln.nn's activations) see every shape their
        # callers use; only a user's function warns about recompiling.
        self._warn_recompiles = True
        self._name = function_name(fun)
        self._source = function_source(fun)
        if static_argnums is None and static_argnames is None:
            self._static_argnums, self._static_argnames = (), ()  # no signature inspection
        else:
            self._static_argnums, self._static_argnames = jit_options.static_options(
                fun, self._name, static_argnums, static_argnames
            )
        self._donate_argnums = jit_options.donated_positions(
            fun,
            self._name,
            donate_argnums,
            donate_argnames,
            self._static_argnums,
            self._static_argnames,
        )
        # (checked above; keyword-only parameters are donated by name)
        self._donate_argnames = (
            (donate_argnames,) if isinstance(donate_argnames, str) else tuple(donate_argnames or ())
        )
        self._backend = backend
        self._on_stale = on_stale_capture
        self._has_static = bool(self._static_argnums or self._static_argnames)
        self._fc_key = (
            cache.function_key(fun),
            self._static_argnums,
            self._static_argnames,
            self._donate_argnums,
            backend,
            on_stale_capture,
        )
        self._fc = cache.function_cache(
            self._fc_key, self._name, self._source, watch_captures=on_stale_capture != "ignore"
        )
        # This object's own view of the cache: the hot path looks entries up here only.
        self._entries = cache.AdoptedTable()
        self._stale_reason: str | None = None

    # --- the call path -------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        # The hot path: no Python per leaf beyond reading its cached (shape, dtype, weak_type),
        # one dict lookup, one call. Arguments that are all arrays/scalars skip flattening.
        if self._has_static or _trace_state.trace is not None or _config.disable_jit:
            return self._call_slow(args, kwargs)
        if _config.check_special:  # debug_nans / debug_infs: the outputs are checked
            return self._call_slow(args, kwargs)
        table = self._entries
        last = table.last
        if last is not None and not kwargs:
            # The signature of the previous call, compared by identity (signatures are
            # interned): no key to build or hash.
            sigs, trace_key, backend, entry = last
            if (
                len(args) == len(sigs)
                and trace_key is _config.trace_key
                and backend == (self._backend or _config.backend)
            ):
                for x, s in zip(args, sigs):
                    if type(x) is not Array or x._sig is not s:
                        break
                else:
                    entry.stamp = next(_clock)
                    _stats.hits += 1
                    outs = entry.execute(args)
                    if entry.single_output:
                        return outs[0]
                    return _tree_unflatten(entry.out_tree, outs)
        sig = []
        plain = True
        leaves = None if kwargs else args
        if leaves is not None:
            for x in args:
                if type(x) is Array:
                    s = x._sig
                    if s is None:
                        v = x._value
                        s = x._sig = _intern_signature((v.shape, v.dtype, x.weak_type))
                    sig.append(s)
                else:
                    s = _flat_signature(x)
                    if s is None:  # a container (or an invalid leaf): flatten below
                        leaves = None
                        break
                    plain = False
                    sig.append(s)
            tree = len(args)
        if leaves is None:
            leaves, treedef = _flatten_args(args, kwargs)
            sig = []
            plain = True
            for x in leaves:
                if type(x) is Array:
                    s = x._sig
                    if s is None:
                        v = x._value
                        s = x._sig = _intern_signature((v.shape, v.dtype, x.weak_type))
                    sig.append(s)
                else:
                    plain = False
                    sig.append(_leaf_signature(x))
            tree = _tree_key(treedef, len(args), bool(kwargs))
        key = (tree, tuple(sig), _config.trace_key, self._backend or _config.backend, ())
        v = None  # (a donated argument's buffer must have no reference left here)
        entry = self._entries.get(key)
        if entry is not None and (
            entry.fast or (entry.execute is not None and not self._must_retrace(entry))
        ):
            entry.stamp = next(_clock)
            _stats.hits += 1
            if plain and leaves is args and entry.fast:
                table.last = (tuple(sig), key[2], key[3], entry)
            if plain:
                outs = entry.execute(leaves)
            else:
                outs = execute_leaves(entry, leaves, self._name)
            if entry.single_output:
                return outs[0]
            return _tree_unflatten(entry.out_tree, outs)
        return self._call_slow(args, kwargs)

    def _call_slow(self, args: tuple, kwargs: dict):
        if _config.disable_jit:
            return self._fun(*args, **kwargs)
        dyn_args, dyn_kwargs, static_key = self._split(args, kwargs)
        leaves, in_tree = _flatten_args(dyn_args, dyn_kwargs)
        if _trace_state.trace is not None:
            return self._call_staged(
                args, kwargs, dyn_args, dyn_kwargs, static_key, leaves, in_tree
            )
        sig = tuple(_leaf_signature(x) for x in leaves)
        key = self._key(in_tree, len(dyn_args), bool(dyn_kwargs), sig, static_key)
        entry = self._find(key)
        if (
            entry is None
            or entry.executable is None
            or (entry.watched and self._must_retrace(entry))
        ):
            retrace = entry is not None and entry.executable is not None
            entry = self._build(
                key,
                args,
                kwargs,
                dyn_args,
                dyn_kwargs,
                static_key,
                leaves,
                in_tree,
                compile_it=True,
                retrace=retrace,
                found=entry,
            )
        else:
            entry.stamp = next(_clock)
            _stats.hits += 1
        outs = execute_leaves(entry, leaves, self._name)
        return _tree_unflatten(entry.out_tree, outs)

    def _key(self, in_tree, nargs: int, has_kwargs: bool, sig: tuple, static_key) -> tuple:
        """The entry key (see kiln.runtime.cache); the hot path builds the same tuple."""
        static = ()
        if self._has_static:
            static_args, static_kwargs = static_key
            static = (
                tuple((i, type(v), v) for i, v in static_args),
                tuple((k, type(v), v) for k, v in static_kwargs),
            )
        key = (
            _tree_key(in_tree, nargs, has_kwargs),
            sig,
            _config.trace_context(),
            self._backend or _config.backend,
            static,
        )
        try:
            hash(key)
        except TypeError:
            raise self._unhashable_static_error(static_key) from None
        return key

    def _split(self, args: tuple, kwargs: dict):
        if not self._has_static:
            return args, kwargs, ((), ())
        return api_util.split_static(args, kwargs, self._static_argnums, self._static_argnames)

    def _call_staged(self, args, kwargs, dyn_args, dyn_kwargs, static_key, leaves, in_tree):
        """Under an outer trace: stage one pjit equation calling the traced jaxpr."""
        names = self._leaf_names(args, kwargs, in_tree, leaves)
        avals = self._abstractify(leaves, names)
        key = self._key(
            in_tree,
            len(dyn_args),
            bool(dyn_kwargs),
            tuple(_aval_signature(a) for a in avals),
            static_key,
        )
        entry = self._find(key)
        if entry is not None and not (entry.watched and self._must_retrace(entry)):
            traced = entry.traced
        else:
            traced = self._trace(avals, in_tree, bool(dyn_kwargs), static_key, names)
            if not any(isinstance(c, Tracer) for c in traced.jaxpr.consts):
                if entry is None:
                    entry = cache.add_traced(self._fc, key, traced)
                else:
                    entry = cache.Entry(key, self._fc, traced)
                    cache.insert(self._fc, key, entry)
                cache.adopt(self._entries, entry)
        closed = traced.jaxpr
        captured = [c for c in closed.consts if isinstance(c, Tracer)]
        if captured:
            closed = _hoist_tracer_consts(closed)
        outs = pjit_p.bind(*captured, *leaves, jaxpr=closed, name=self._name)
        return _tree_unflatten(traced.out_tree, outs)

    # --- tracing and compiling ------------------------------------------------------------
    def _build(
        self,
        key,
        args,
        kwargs,
        dyn_args,
        dyn_kwargs,
        static_key,
        leaves,
        in_tree,
        compile_it: bool,
        retrace: bool = False,
        allow_shape_structs: bool = False,
        found: cache.Entry | None = None,
    ) -> cache.Entry:
        """Trace (and compile) for `key`, or finish `found`, the entry `_find` gave; the result
        is adopted by this object."""
        names_box: list = []

        def names() -> list[str]:
            if not names_box:
                names_box.append(self._leaf_names(args, kwargs, in_tree, leaves))
            return names_box[0]

        def trace() -> cache.Traced:
            avals = self._abstractify(leaves, names(), allow_shape_structs)
            return self._trace(avals, in_tree, bool(dyn_kwargs), static_key, names())

        def on_miss() -> None:
            if _config.explain_cache_misses:
                self._explain_miss(key, names(), static_key, retrace)

        # An adopted entry may belong to the table this object used before moving on.
        fc = found.fc if found is not None else self._fc
        entry = cache.lookup_or_build(
            fc, key, trace, self._compile if compile_it else None, retrace=retrace, on_miss=on_miss
        )
        cache.adopt(self._entries, entry)
        return entry

    def _trace(self, avals, in_tree, has_kwargs: bool, static_key, names) -> cache.Traced:
        fun = self._fun
        name = self._name
        has_static = self._has_static

        def flat_fun(*tracers):
            tree = _tree_unflatten(in_tree, list(tracers))
            call_args, call_kwargs = tree if has_kwargs else (tree, {})
            if has_static:
                call_args, call_kwargs = api_util.merge_static(call_args, call_kwargs, static_key)
            out = fun(*call_args, **call_kwargs)
            out_leaves, out_tree = _tree_flatten(out, namespace=_NAMESPACE)
            for leaf in out_leaves:
                if not isinstance(leaf, _VALID_LEAF):
                    raise TypeError(
                        f"jit({name}) returned a value of type "
                        f"{type(leaf).__name__}, which is not an array; jitted "
                        "functions return pytrees of arrays and scalars."
                    )
            return out_leaves, out_tree

        start = time.perf_counter()
        debug = DebugInfo(name, self._source, "jit", list(names))
        closed, out_tree = trace_to_jaxpr(flat_fun, avals, debug)
        guards = cache.record_captures(fun)
        return cache.Traced(
            closed,
            out_tree,
            tuple(avals),
            list(names),
            self._static_names(static_key),
            guards,
            time.perf_counter() - start,
        )

    def _compile(self, traced: cache.Traced):
        from kiln.compiler import pipeline

        start = time.perf_counter()
        optimized = pipeline.optimize(traced.jaxpr, self._name)
        optimized_at = time.perf_counter()
        executable = pipeline.compile(optimized, self._backend, self._name)
        if self._donate_argnums or self._donate_argnames:
            self._donate(executable, traced)
        done = time.perf_counter()
        if _config.log_compiles:
            logger.warning(
                "Compiling %s for signature %s: trace %.2f ms, optimize %.2f ms, "
                "backend %s %.2f ms",
                self._name,
                _format_signature(traced.arg_names, traced.in_avals, traced.static_names),
                traced.trace_seconds * 1e3,
                (optimized_at - start) * 1e3,
                executable.backend,
                (done - optimized_at) * 1e3,
            )
        fc = self._fc
        if (
            fc.compiles + 1 >= RECOMPILE_WARNING_THRESHOLD
            and not fc.warned_recompiles
            and self._warn_recompiles
        ):
            fc.warned_recompiles = True
            warnings.warn(
                f"kiln.jit has compiled `{self._name}` (defined at {self._source}) "
                f"{fc.compiles + 1} times, once per new input signature (shapes, dtypes, weak "
                "types, static argument values). If shapes vary, pad inputs to a few fixed "
                "sizes; if a static argument takes many values, pass it as a traced argument "
                "instead of through static_argnums/static_argnames.",
                RecompilationWarning,
                stacklevel=_user_stacklevel(),
            )
        return executable

    def _donate(self, executable, traced: cache.Traced) -> None:
        """Hand the donated arguments' leaves to the executable; warn about those no output
        can use (as JAX does: their Arrays stay valid)."""
        positional, _ = self._positional_names()
        bases = {self._param_name(p, len(positional)) for p in self._donate_argnums}
        bases |= set(self._donate_argnames)
        leaves = [
            n
            for n, name in enumerate(traced.arg_names)
            if any(name == base or name.startswith(base + "[") for base in bases)
        ]
        unusable = executable.donate(leaves) if leaves else []
        if unusable:
            shapes = ", ".join(traced.in_avals[n].str_short() for n in unusable)
            warnings.warn(
                f"Some donated buffers were not usable: {shapes}. kiln reuses a donated "
                "argument's buffer for an output of the same shape and dtype that the compiled "
                "program can write into it; these arguments stay valid.",
                UserWarning,
                stacklevel=_user_stacklevel(),
            )

    # --- arguments: names, validation, statics ---------------------------------------------
    def _positional_names(self) -> tuple[list[str], str | None]:
        """The function's positional parameter names and its *args name (computed once)."""
        names = self.__dict__.get("_positional")
        if names is None:
            try:
                params = inspect.signature(self._fun).parameters.values()
            except (TypeError, ValueError):
                params = []
            positional = [
                p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            varargs = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
            names = self.__dict__["_positional"] = (positional, varargs)
        return names

    def _param_name(self, index: int, nargs: int) -> str:
        positional, varargs = self._positional_names()
        index = index % nargs if nargs and index < 0 else index
        if index < len(positional):
            return positional[index]
        if varargs is not None:
            return f"{varargs}[{index - len(positional)}]"
        return f"args[{index}]"

    def _leaf_names(self, args: tuple, kwargs: dict, in_tree, leaves) -> list[str]:
        """A name per flattened leaf, as the user wrote it: `x`, `params[0]['W']`."""
        dyn_args, dyn_kwargs, _ = self._split(args, kwargs)
        static = set()
        if self._has_static:
            nargs = len(args)
            static = {i % nargs for i in self._static_argnums if -nargs <= i < nargs}
        positions = [i for i in range(len(args)) if i not in static]
        paths, _, _ = optree.tree_flatten_with_path((dyn_args, dyn_kwargs), namespace=_NAMESPACE)
        names = []
        for path in paths:
            if path[0] == 0:
                base = self._param_name(positions[path[1]], len(args))
            else:
                base = str(path[1])
            names.append(base + "".join(f"[{k!r}]" for k in path[2:]))
        return names

    def _abstractify(
        self, leaves: list, names: list[str], allow_shape_structs: bool = False
    ) -> list[ShapedArray]:
        avals = []
        for x, name in zip(leaves, names):
            if allow_shape_structs and isinstance(x, ShapeDtypeStruct):
                avals.append(ShapedArray(x.shape, dtypes.canonicalize(x.dtype), x.weak_type))
                continue
            if not isinstance(x, _VALID_LEAF) or (
                isinstance(x, (np.ndarray, np.generic))
                and x.dtype.kind not in "biufc"
                and not dtypes.is_floating(x.dtype)
            ):
                what = (
                    f"of type {type(x)}"
                    if not isinstance(x, (np.ndarray, np.generic))
                    else f"a NumPy value of dtype {x.dtype}"
                )
                raise TypeError(
                    f"Error interpreting argument to jit({self._name}) as an abstract array. "
                    f"The problematic value is {what} and was passed to the function at path "
                    f"{name}.\nThis typically means that a jit-wrapped function was called "
                    "with a non-array argument, and this argument was not marked as static "
                    "using the static_argnums or static_argnames parameters of jit."
                )
            if isinstance(x, Tracer) and _trace_state.trace is None:
                raise leaked_tracer_error(x)
            dtypes.check_argument(x, name)
            if isinstance(x, (np.ndarray, np.generic)):
                # NumPy values are strongly typed, even np.float64 (a subclass of float).
                avals.append(ShapedArray(x.shape, dtypes.canonicalize(x.dtype), False))
            else:
                avals.append(get_aval(x))
        return avals

    def _static_names(self, static_key) -> list[tuple[str, Any]]:
        static_args, static_kwargs = static_key
        nargs = max((i for i, _ in static_args), default=-1) + 1
        return [(self._param_name(i, nargs), v) for i, v in static_args] + [
            (k, v) for k, v in static_kwargs
        ]

    def _unhashable_static_error(self, static_key) -> Exception:
        for name, value in self._static_names(static_key):
            try:
                hash(value)
            except TypeError as err:
                return ValueError(
                    f"Non-hashable static arguments are not supported: the static argument "
                    f"`{name}` of jit({self._name}) is a value of type {type(value).__name__} "
                    f"({err}). Static arguments must be hashable, since they are part of the "
                    "compile-cache key: pass a tuple instead of a list, or pass the value as a "
                    "regular (traced) argument."
                )
        return TypeError(f"jit({self._name}): the arguments cannot be hashed.")

    # --- captured values -------------------------------------------------------------------
    def _find(self, key) -> cache.Entry | None:
        """The entry this object may use for `key`, or None when it must trace.

        An entry it already uses is used again as it is. Another entry, traced by an equal
        function, is adopted only if every value that trace captured is still current; if one
        has changed, this object moves on to a fresh table (the objects using the stale entry
        keep it) and traces anew, as a new function object does in JAX. In "retrace" mode
        every user wants today's values, so the stale entry is dropped instead."""
        entry = self._entries.get(key)
        if entry is not None:
            return entry
        while True:
            fc = self._fc
            entry = fc.entries.get(key)
            if entry is None:
                return None
            stale = cache.stale_guards(entry.guards)
            if not stale:
                cache.adopt(self._entries, entry)
                return entry
            if self._on_stale == "retrace":
                cache.forget(entry)
                return None
            self._stale_reason = (
                "an equal function was traced for this signature while "
                + ", ".join(f"the {g.describe()} held {g.held()}" for g in stale)
                + "; it has changed since"
            )
            self._fc = cache.successor(self._fc_key, fc)

    def _must_retrace(self, entry: cache.Entry) -> bool:
        """Check the watched captures of an entry this object uses; warn (once per variable)
        or ask for a retrace."""
        stale = cache.stale_guards(entry.watched)
        if not stale:
            return False
        if self._on_stale == "retrace":
            return True
        fc = entry.fc
        for guard in stale:
            warn_key = (guard.kind, id(guard.container), guard.name)
            if warn_key not in fc.warned_stale:
                fc.warned_stale.add(warn_key)
                warnings.warn(
                    f"kiln.jit: `{self._name}` (defined at {self._source}) was traced while the "
                    f"{guard.describe()} held {guard.held()}; "
                    f"`{guard.name}` has since been rebound, but this jitted function keeps "
                    "using the value from trace time (as JAX does; a new jit of the function "
                    "would trace again). Pass it as an argument, or use "
                    "jit(..., on_stale_capture='retrace') to retrace when it changes "
                    "('ignore' silences this warning).",
                    StaleCaptureWarning,
                    stacklevel=_user_stacklevel(),
                )
        # Warned about: stop checking these on each call, so the call path is fast again
        # (new objects still check them before adopting the entry).
        entry.unwatch(stale)
        return False

    # --- cache-miss explanations ----------------------------------------------------------
    def _explain_miss(self, key, names: list[str], static_key, retrace: bool) -> None:
        where = f"`{self._name}` (defined at {self._source})"
        if retrace:
            reason = "a global or closure variable it captured was rebound (retracing)"
        elif self._stale_reason is not None:
            reason = self._stale_reason
            self._stale_reason = None
        else:
            previous = [k for k in self._fc.seen_keys if k != key]
            reason = (
                cache.explain_miss(key, previous, names, self._static_names(static_key))
                if previous
                else "tracing for the first time (a new function)"
            )
        logger.warning("kiln.jit cache miss for %s: %s", where, reason)

    # --- public helpers --------------------------------------------------------------------
    def lower(self, *args, **kwargs) -> "Lowered":
        """Trace for these arguments (arrays, scalars or ShapeDtypeStructs) without running."""
        dyn_args, dyn_kwargs, static_key = self._split(args, kwargs)
        leaves, in_tree = _flatten_args(dyn_args, dyn_kwargs)
        sig = tuple(
            _aval_signature(ShapedArray(x.shape, dtypes.canonicalize(x.dtype), x.weak_type))
            if isinstance(x, ShapeDtypeStruct)
            else _leaf_signature(x)
            for x in leaves
        )
        key = self._key(in_tree, len(dyn_args), bool(dyn_kwargs), sig, static_key)
        entry = self._find(key)
        if entry is None or (entry.watched and self._must_retrace(entry)):
            entry = self._build(
                key,
                args,
                kwargs,
                dyn_args,
                dyn_kwargs,
                static_key,
                leaves,
                in_tree,
                compile_it=False,
                allow_shape_structs=True,
                retrace=entry is not None,
                found=entry,
            )
        return Lowered(self, entry)

    def clear_cache(self) -> None:
        """Forget every compiled signature of this function."""
        for entry in list(self._entries.values()):
            cache.forget(entry)
        self._fc.clear()

    def _cache_size(self) -> int:
        """How many signatures of this function are cached."""
        return len(self._fc.entries.keys() | self._entries.keys())

    def cache_info(self) -> dict:
        """Statistics of this function's cache (shared by jits of equal functions)."""
        fc = self._fc
        return {
            "size": len(fc.entries),
            "misses": fc.misses,
            "traces": fc.traces,
            "compiles": fc.compiles,
        }

    def __get__(self, instance, owner=None):
        return self if instance is None else types.MethodType(self, instance)

    def __repr__(self) -> str:
        return f"<kiln.jit of {self._fun!r}>"


def _hoist_tracer_consts(closed: ClosedJaxpr) -> ClosedJaxpr:
    """Tracers of an outer trace captured by closure become leading explicit inputs."""
    jaxpr = closed.jaxpr
    is_tracer = [isinstance(c, Tracer) for c in closed.consts]
    hoisted = [v for v, t in zip(jaxpr.constvars, is_tracer) if t]
    kept = [(v, c) for v, c, t in zip(jaxpr.constvars, closed.consts, is_tracer) if not t]
    new = Jaxpr(
        [v for v, _ in kept], hoisted + list(jaxpr.invars), jaxpr.outvars, jaxpr.eqns, jaxpr.effects
    )
    return ClosedJaxpr(new, [c for _, c in kept])


_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_stacklevel() -> int:
    """The warnings stacklevel of the first frame outside the kiln package."""
    import sys

    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_KILN_DIR):
        frame = frame.f_back
        level += 1
    return level
