"""Analyses and rewrites over kernel IR: free variables, stability, bottom-up rewriting,
substitution.

The tools later passes use to transform kernels (kir_schedule's loop rewrites; unrolling or
batching in the lowering). Everything here returns new nodes; the IR is never mutated.
"""

from __future__ import annotations

from typing import Callable

from kiln.compiler import kir

from kiln.compiler.kir import (
    ARG_REDUCTIONS,
    ArgValue,
    Expr,
    If,
    KirError,
    Load,
    Loop,
    Op,
    Reduce,
    Stmt,
    Store,
    Var,
    toposort,
)


def free_vars(node: Expr, memo: dict | None = None) -> frozenset[Var]:
    """Loop variables node depends on (a reduction's own variable is not free in it).

    Pass the same memo dict across calls to share the work.
    """
    memo = {} if memo is None else memo
    if node in memo:
        return memo[node]
    free_vars_in_order(toposort([node], skip=memo), memo)
    return memo[node]


def free_vars_in_order(nodes, memo: dict) -> None:
    """free_vars of every node of a list whose children come before their parents (as
    toposort orders them) or are in memo already, into memo."""
    for item in nodes:
        found = frozenset({item}) if isinstance(item, Var) else frozenset()
        for child in item.children():
            found |= memo[child]
        memo[item] = found - {item.var} if isinstance(item, Reduce) else found


def is_stable(node: Expr, written, memo: dict) -> bool:
    """Whether node's value cannot change within a kernel whose statements store to the
    buffers `written`: it reads none of them. The emitter keeps only stable values from one
    statement to the next, and the kernel printer follows the same rule.

    Pass the same memo dict across calls to share the work.
    """
    if node in memo:
        return memo[node]
    for item in toposort([node], skip=memo):
        reads_written = isinstance(item, Load) and item.buffer in written
        memo[item] = not reads_written and all(memo[child] for child in item.children())
    return memo[node]


def rewrite(
    node: Expr, replace: Callable[[Expr, list[Expr]], Expr | None], memo: dict | None = None
) -> Expr:
    """Rebuild node bottom-up. For each original node, replace(original, new_children) may
    return its replacement; None rebuilds it on the new children. memo maps originals to their
    results (pass one dict across calls to share the work)."""
    rebuilt = {} if memo is None else memo
    if node in rebuilt:
        return rebuilt[node]
    for item in toposort([node], skip=rebuilt):
        new = [rebuilt[child] for child in item.children()]
        replacement = replace(item, new)
        if replacement is not None:
            rebuilt[item] = replacement
        elif all(a is b for a, b in zip(new, item.children())):
            rebuilt[item] = item
        else:
            rebuilt[item] = _with_children(item, new)
    return rebuilt[node]


def _with_children(item: Expr, new: list[Expr]) -> Expr:
    if isinstance(item, Load):
        return Load(item.buffer, new[0])
    if isinstance(item, Op):
        return Op(item.op, new, item.dtype, item.nsw)
    if isinstance(item, ArgValue):
        return ArgValue(new[0])
    if isinstance(item, Reduce):
        start, stop, value, extra = new
        if item.kind in ARG_REDUCTIONS:
            return Reduce(
                item.kind, item.var, start, stop, value, index=extra, index_dtype=item.dtype
            )
        return Reduce(item.kind, item.var, start, stop, value, init=extra)
    raise KirError(f"cannot rebuild {type(item).__name__}")


def substitute(node: Expr, mapping: dict[Expr, Expr]) -> Expr:
    """node with every occurrence of mapping's keys (usually Vars) replaced.

    A reduction's own variable is never replaced inside it (keys should not name it).
    """
    return rewrite(node, lambda original, children: mapping.get(original))


def rewrite_stmt(stmt: Stmt, rewrite_expr: Callable[[Expr], Expr]) -> Stmt:
    """A statement (and its nested body) with rewrite_expr applied to every expression."""
    if isinstance(stmt, Store):
        return Store(stmt.buffer, rewrite_expr(stmt.index), rewrite_expr(stmt.value))
    if isinstance(stmt, Loop):
        return Loop(
            stmt.var,
            rewrite_expr(stmt.start),
            rewrite_expr(stmt.stop),
            [rewrite_stmt(s, rewrite_expr) for s in stmt.body],
        )
    if isinstance(stmt, kir.MatMul):
        return stmt.rebuilt(rewrite_expr)
    return If(rewrite_expr(stmt.cond), [rewrite_stmt(s, rewrite_expr) for s in stmt.body])


def substitute_stmt(stmt: Stmt, mapping: dict[Expr, Expr]) -> Stmt:
    """A statement (and its nested body) with substitute applied to every expression."""
    return rewrite_stmt(stmt, lambda node: substitute(node, mapping))
