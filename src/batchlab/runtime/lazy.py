"""Package attributes imported on first use (PEP 562), so importing a package for one of its
modules does not import all the others."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(namespace: dict, exports: dict[str, str]) -> tuple[Callable, Callable]:
    """`__getattr__` and `__dir__` for the package whose globals are `namespace`.

    `exports` maps each public name to the submodule (relative to the package) that defines it.
    A name is imported from its submodule when first asked for and then kept in the package,
    as an eager `from .sub import name` would have done; a submodule not yet imported is
    imported when asked for as an attribute, as it was when the package imported them all.
    """
    package = namespace["__name__"]

    def __getattr__(name: str):
        if name not in exports:
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        namespace[name] = value   # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
