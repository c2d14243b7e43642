"""A small Wadler/Lindig-style pretty printer: documents of text, breaks, nesting and groups.

A group is printed flat when its contents fit in the remaining width, otherwise its breaks become
newlines indented to the enclosing nest level. The jaxpr printer builds documents with these.
"""

from __future__ import annotations

from dataclasses import dataclass


class Doc:
    def __add__(self, other: "Doc") -> "Doc":
        return Concat((self, other))

    def format(self, width: int = 80) -> str:
        return _format(self, width)

    def __str__(self) -> str:
        return self.format()


@dataclass(frozen=True, eq=False)
class Text(Doc):
    text: str


@dataclass(frozen=True, eq=False)
class Concat(Doc):
    children: tuple


@dataclass(frozen=True, eq=False)
class Break(Doc):
    text: str = " "


@dataclass(frozen=True, eq=False)
class Nest(Doc):
    indent: int
    child: Doc


@dataclass(frozen=True, eq=False)
class Group(Doc):
    child: Doc


NIL = Text("")


def text(s: str) -> Doc:
    return Text(s)


def brk(s: str = " ") -> Doc:
    return Break(s)


def nest(n: int, doc: Doc) -> Doc:
    return Nest(n, doc)


def group(doc: Doc) -> Doc:
    return Group(doc)


def concat(docs) -> Doc:
    return Concat(tuple(docs))


def join(sep: Doc, docs) -> Doc:
    out = []
    for i, d in enumerate(docs):
        if i:
            out.append(sep)
        out.append(d)
    return Concat(tuple(out))


_FLAT, _BREAK = 0, 1


def _fits(doc: Doc, width: int) -> bool:
    """Does `doc`, printed flat, take at most `width` columns?"""
    stack = [doc]
    while stack and width >= 0:
        d = stack.pop()
        if isinstance(d, Text):
            width -= len(d.text)
        elif isinstance(d, Break):
            width -= len(d.text)
        elif isinstance(d, Concat):
            stack.extend(reversed(d.children))
        else:  # Nest or Group: flat mode ignores both
            stack.append(d.child)
    return width >= 0


def _format(doc: Doc, width: int) -> str:
    out: list[str] = []
    column = 0
    stack = [(0, _BREAK, doc)]
    while stack:
        indent, mode, d = stack.pop()
        if isinstance(d, Text):
            out.append(d.text)
            column += len(d.text)
        elif isinstance(d, Break):
            if mode == _FLAT:
                out.append(d.text)
                column += len(d.text)
            else:
                out.append("\n" + " " * indent)
                column = indent
        elif isinstance(d, Concat):
            stack.extend((indent, mode, c) for c in reversed(d.children))
        elif isinstance(d, Nest):
            stack.append((indent + d.indent, mode, d.child))
        else:  # Group
            flat = mode == _FLAT or _fits(d.child, width - column)
            stack.append((indent, _FLAT if flat else _BREAK, d.child))
    return "".join(out)
