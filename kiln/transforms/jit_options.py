"""Checking the options of kiln.jit against the function's signature: static_argnums,
static_argnames, donate_argnums and donate_argnames. A mistake raises the error JAX raises
(TypeError for a malformed option, ValueError for one that does not fit the function), with a
message that names the argument and the fix.
"""

from __future__ import annotations

import inspect
import operator
from typing import Any, Callable, Sequence

from kiln import api_util

__all__ = ["static_options", "donated_positions"]


def static_options(
    fun: Callable, name: str, static_argnums, static_argnames
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Check static_argnums/static_argnames and complete each from the other (by signature)."""
    argnums = _argnums_option("static_argnums", static_argnums)
    argnames = _argnames_option("static_argnames", static_argnames)
    params = _parameters(fun)
    _check_argnames(params, name, "static_argnames", argnames)
    _check_argnums(params, name, "static_argnums", argnums)
    return api_util.normalize_argnums(fun, argnums, argnames)


def donated_positions(
    fun: Callable,
    name: str,
    donate_argnums,
    donate_argnames,
    static_argnums: Sequence[int],
    static_argnames: Sequence[str],
) -> tuple[int, ...]:
    """Check donate_argnums/donate_argnames (CPU buffers are never donated, but a mistake there
    is reported as JAX does) and return the donated positions."""
    if donate_argnums is None and donate_argnames is None:
        return ()
    argnums = _argnums_option("donate_argnums", donate_argnums)
    argnames = _argnames_option("donate_argnames", donate_argnames)
    params = _parameters(fun)
    _check_argnames(params, name, "donate_argnames", argnames)
    _check_argnums(params, name, "donate_argnums", argnums)
    positional = _positional(params or [])

    def position(i: int) -> int:
        return i % len(positional) if positional and i < 0 else i

    positions = {position(i) for i in argnums} | {
        positional.index(n) for n in argnames if n in positional
    }
    names = set(argnames) | {positional[i] for i in positions if i < len(positional)}
    both = (names & set(static_argnames)) | {
        positional[i] if i < len(positional) else f"args[{i}]"
        for i in positions & {position(i) for i in static_argnums}
    }
    if both:
        raise ValueError(
            f"jitted function {name}: static_argnames and donate_argnames cannot intersect, but "
            f"the arguments {both} are marked both static and donated. A static argument is a "
            "Python value baked into the compiled code, so it has no buffer to donate: remove "
            "it from donate_argnums/donate_argnames."
        )
    return tuple(sorted(positions))


def _argnums_option(option: str, value: Any) -> tuple[int, ...]:
    """An argnums option as a tuple of ints (it may be an int or a sequence of them)."""
    if value is None:
        return ()
    try:
        return (operator.index(value),)
    except TypeError:
        pass
    try:
        return tuple(operator.index(i) for i in value)
    except TypeError:
        raise TypeError(
            f"jit: {option} must be an int or a sequence of ints, got {value!r}."
        ) from None


def _argnames_option(option: str, value: Any) -> tuple[str, ...]:
    """An argnames option as a tuple of names (it may be a str or a sequence of them)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    try:
        names = tuple(value)
    except TypeError:
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(f"jit: {option} must be a str or a sequence of str, got {value!r}.")
    return names


def _parameters(fun: Callable) -> list[inspect.Parameter] | None:
    """The function's parameters, or None when it has no inspectable signature (a builtin):
    then nothing can be checked, as in JAX."""
    try:
        return list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return None


def _positional(params: list[inspect.Parameter]) -> list[str]:
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _check_argnums(params, name: str, option: str, argnums: Sequence[int]) -> None:
    """Every index in `argnums` names a positional parameter (unless there is *args)."""
    if params is None or any(p.kind == p.VAR_POSITIONAL for p in params):
        return
    positional = _positional(params)
    for i in argnums:
        if not -len(positional) <= i < len(positional):
            raise ValueError(
                f"jitted function {name} has {option}={tuple(argnums)}, but only accepts "
                f"{len(positional)} positional arguments ({', '.join(positional) or 'none'}); "
                "argument numbers count from 0."
            )


def _check_argnames(params, name: str, option: str, argnames: Sequence[str]) -> None:
    """Every name in `argnames` is a parameter that can be passed by keyword (unless the
    function takes **kwargs)."""
    if params is None or not argnames or any(p.kind == p.VAR_KEYWORD for p in params):
        return
    by_name = {p.name: p for p in params if p.kind != p.VAR_POSITIONAL}
    by_number = option.replace("names", "nums")
    missing = [n for n in argnames if n not in by_name]
    if missing:
        raise ValueError(
            f"jitted function {name} has invalid argnames {set(missing)} in {option}: the "
            f"function does not take these arguments (its parameters are "
            f"{', '.join(by_name) or 'none'}). Check the spelling, or use {by_number} to refer "
            "to an argument by position."
        )
    positional_only = [n for n in argnames if by_name[n].kind == inspect.Parameter.POSITIONAL_ONLY]
    if positional_only:
        raise ValueError(
            f"jitted function {name} has invalid argnames {set(positional_only)} in {option}: "
            "these are positional-only, so they cannot be passed by keyword; use "
            f"{by_number} to refer to them by position."
        )
