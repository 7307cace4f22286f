"""Classes chosen by name on the command line, imported only when chosen.

`--launcher`, `--isolation` and `--image_provisioner_backend` each map Mesos's
names to ``module:Class`` strings, so that a host never imports what it does
not use (the linux launcher's dependencies on a host without an OCI runtime).
"""

from __future__ import annotations

import importlib
from typing import TypeVar

T = TypeVar("T")


def load_class(target: str, base: type[T]) -> type[T]:
    """The class ``module:Class`` names, its module imported now; it must be a `base`."""
    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{target} is not a {base.__name__}")
    return cls
