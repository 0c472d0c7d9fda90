"""A package's public names, imported on first use (PEP 562 module ``__getattr__``).

A package whose ``__init__`` imports its whole API makes every one of its submodules cost
that much: ``hub.payments.money`` (a package server's one need) pulled in the payment
authority, the gateway, the MCP host and jsonschema. With :func:`lazy_exports` the package
imports nothing until one of its names is asked for; type checkers see the names through
the package's ``if TYPE_CHECKING:`` imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_exports(package: str, modules: Mapping[str, Iterable[str]]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``, from its table of module → public names
    (as its ``TYPE_CHECKING`` imports read): a name is imported from its module on first
    use and kept in the package as a plain attribute (the next use does not come here).
    Any other name raises :class:`AttributeError`, as a missing attribute does (so
    ``from package import submodule`` still imports the submodule)."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
