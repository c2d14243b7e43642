"""The ahead-of-time stages of kiln.jit: Lowered (jit(f).lower(*args), a traced function for
one signature) and Compiled (its compiled program, callable with the dynamic arguments).
Re-exported by kiln.transforms.jit."""

from __future__ import annotations

from typing import TYPE_CHECKING

import optree

from kiln.core.jaxpr import ClosedJaxpr
from kiln.runtime import cache
from kiln.transforms.jit_signature import (
    _canonical,
    execute_leaves,
    _flatten_args,
    _leaf_signature,
    _short,
    _signature_str,
    _tree_key,
)

if TYPE_CHECKING:
    from kiln.transforms.jit import JitWrapped

_tree_unflatten = optree.tree_unflatten


# --- lowering -----------------------------------------------------------------------------------


class Lowered:
    """A traced function for one signature (jit(f).lower(*args))."""

    def __init__(self, wrapped: JitWrapped, entry: cache.Entry):
        self._wrapped = wrapped
        self._entry = entry

    @property
    def jaxpr(self) -> ClosedJaxpr:
        """The staged jaxpr."""
        return self._entry.traced.jaxpr

    @property
    def in_avals(self) -> tuple:
        return self._entry.in_avals

    @property
    def out_avals(self) -> list:
        return self._entry.traced.jaxpr.out_avals

    def as_text(self) -> str:
        """The staged jaxpr, as text."""
        return self._entry.traced.jaxpr.pretty_print()

    def compile(self) -> "Compiled":
        """Optimize and compile (through the cache: a later call with this signature hits)."""
        wrapped = self._wrapped
        entry = self._entry
        if entry.executable is None:
            entry = cache.lookup_or_build(
                entry.fc, entry.key, lambda: entry.traced, wrapped._compile
            )
            cache.adopt(wrapped._entries, entry)
        return Compiled(wrapped, entry)


class Compiled:
    """A compiled function for one signature: call it with the dynamic (non-static) arguments."""

    def __init__(self, wrapped: JitWrapped, entry: cache.Entry):
        self._wrapped = wrapped
        self._entry = entry

    def as_text(self) -> str:
        """A header naming the function and its signature, then the optimized program."""
        executable = self._entry.executable
        ins = ", ".join(a.str_short() for a in executable.in_avals)
        outs = ", ".join(a.str_short() for a in executable.out_avals)
        outs = outs if len(executable.out_avals) == 1 else f"({outs})"
        header = (
            f"kiln module jit_{self._wrapped._name}, entry_signature=({ins}) -> {outs}, "
            f"backend={executable.backend}"
        )
        if executable.hidden_args:
            header += f", hidden_args={len(executable.hidden_args)}"
        return f"{header}\n{executable.as_text()}"

    def memory_analysis(self):
        """The compiled program's memory in bytes, with JAX's field names: argument, output,
        alias (outputs written into donated arguments), temp (scratch after buffer reuse) and
        generated code sizes, plus peak_memory_in_bytes (kiln/runtime/memory_plan.py)."""
        return self._entry.executable.memory_stats()

    def __call__(self, *args, **kwargs):
        entry = self._entry
        leaves, in_tree = _flatten_args(args, kwargs)
        sig = tuple(_leaf_signature(x) for x in leaves)
        expected_tree, expected_sig = entry.key[0], entry.key[1]
        same_tree = _tree_key(in_tree, len(args), bool(kwargs)) == expected_tree
        if (
            not same_tree
            or len(sig) != len(expected_sig)
            or any(_canonical(s)[:2] != _canonical(e)[:2] for s, e in zip(sig, expected_sig))
        ):
            raise TypeError(
                f"Compiled function jit({self._wrapped._name}) was compiled for arguments "
                f"({', '.join(_short(a) for a in entry.in_avals)}) but called with "
                f"({', '.join(_signature_str(s) for s in sig)})."
            )
        outs = execute_leaves(entry, leaves, self._wrapped._name)
        return _tree_unflatten(entry.out_tree, outs)
