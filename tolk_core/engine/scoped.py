"""Scopes: a stack of open `with` blocks per thread of control, for the engine's recorders (captures, profiles).

A context variable holds the stack, so a capture or profile opened in one thread never sees launches made in
another, and nested blocks see their own innermost scope.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Scopes(Generic[T]):
    """The open scopes of one kind, innermost last."""

    def __init__(self, name: str):
        self._var: contextvars.ContextVar[tuple[T, ...]] = contextvars.ContextVar(name, default=())

    def open(self) -> tuple[T, ...]:
        """The scopes open here, outermost first (empty: none)."""
        return self._var.get()

    @contextlib.contextmanager
    def enter(self, scope: T) -> Iterator[T]:
        """Open `scope` for the duration of the block."""
        token = self._var.set((*self._var.get(), scope))
        try:
            yield scope
        finally:
            self._var.reset(token)
