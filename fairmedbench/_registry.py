"""A generic name -> item registry filled by a decorator, with close-name suggestions.

Lives outside registry/ so that metrics/ (which never imports registry/) can register metric specs and
profiles with it; `fairmedbench.registry.base` re-exports it.
"""

from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterator, TypeVar

from fairmedbench.errors import InputError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps unique names to items (cards, classes, factories) of one kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        """Register `item` under `name`; a duplicate name is an error."""
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`."""
        return lambda item: self.add(name, item)

    def get(self, name: str) -> T:
        """Return the item named `name`, or fail listing close names."""
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._items, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise InputError(
                f"unknown {self.kind} {name!r}.{hint} Known: {', '.join(sorted(self._items))}"
            ) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._items)

    def values(self) -> list[T]:
        """Registered items in registration order."""
        return list(self._items.values())

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
