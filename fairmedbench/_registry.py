"""A generic name -> item registry filled by a decorator, with close-name suggestions.

Lives outside registry/ so that metrics/ (which never imports registry/) can register metric specs and
profiles with it; `fairmedbench.registry.base` re-exports it.

Plugins: a registry made with `plugins=True` (models, datasets, usages, mitigations) imports, before its first
lookup, the plugin modules named in $FMB_PLUGINS (comma-separated module names) and those advertised by
installed packages under the entry-point group `fairmedbench.plugins`; a plugin module registers its items
with the same public calls the built-in ones use. Loading is once per process and lazy, so `import
fairmedbench` stays cheap and a plugin never runs unless a registry is consulted.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from fairmedbench.errors import InputError

T = TypeVar("T")

PLUGINS_ENV = "FMB_PLUGINS"
PLUGINS_GROUP = "fairmedbench.plugins"
_plugins_loaded: list[str] | None = None


def load_plugins() -> list[str]:
    """Import every plugin module once ($FMB_PLUGINS, then the `fairmedbench.plugins` entry points); return
    the names imported. A module that cannot be imported is reported on stderr in one line and skipped: its
    names stay unknown, so using one fails with the registry's "unknown ..." error (the CLI builds its parser
    from the registries, outside its error handler, so raising here would print a traceback)."""
    global _plugins_loaded
    if _plugins_loaded is not None:
        return _plugins_loaded
    _plugins_loaded = []  # set first: a plugin that looks a name up while it is imported does not recurse
    from importlib.metadata import entry_points

    named = [(m.strip(), PLUGINS_ENV) for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
    named += [(ep.value, f"entry point {ep.name!r} of group {PLUGINS_GROUP}")
              for ep in entry_points(group=PLUGINS_GROUP)]
    for module, where in named:
        try:
            importlib.import_module(module.split(":")[0])
        except ImportError as exc:
            print(f"fairmedbench: warning: plugin module {module!r} (from {where}) cannot be imported ({exc}); "
                  "what it registers is unknown. Put its folder on PYTHONPATH or install its package",
                  file=sys.stderr)
            continue
        _plugins_loaded.append(module)
    return _plugins_loaded


class Registry(Generic[T]):
    """Maps unique names to items (cards, classes, factories) of one kind."""

    def __init__(self, kind: str, plugins: bool = False) -> None:
        self.kind = kind
        self.plugins = plugins  # whether plugin modules may add to it (loaded before the first lookup)
        self._items: dict[str, T] = {}

    def _lookup(self) -> dict[str, T]:
        if self.plugins:
            load_plugins()
        return self._items

    def add(self, name: str, item: T) -> T:
        """Register `item` under `name`; a duplicate name, or an item whose own `name` differs, is an error."""
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        own = getattr(item, "name", name)
        if own != name:
            raise ValueError(f"{self.kind} {name!r}: the item names itself {own!r}; register it under its own name "
                             "(add_named)")
        self._items[name] = item
        return item

    def add_named(self, item: T) -> T:
        """Register `item` under its own `name` attribute (a card's, a profile's, a plugin class's): the key is
        written once, where the item is defined."""
        name = getattr(item, "name", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} {item!r} has no `name` to be registered under")
        return self.add(name, item)

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`."""
        return lambda item: self.add(name, item)

    def get(self, name: str) -> T:
        """Return the item named `name`, or fail listing close names."""
        items = self._lookup()
        try:
            return items[name]
        except KeyError:
            close = difflib.get_close_matches(name, items, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise InputError(
                f"unknown {self.kind} {name!r}.{hint} Known: {', '.join(sorted(items))}"
            ) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._lookup())

    def values(self) -> list[T]:
        """Registered items in registration order."""
        return list(self._lookup().values())

    def __contains__(self, name: object) -> bool:
        return name in self._lookup()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._lookup())
