"""Rootfs backends by Mesos name (`--image_provisioner_backend`), imported when chosen."""

from __future__ import annotations

import logging

from mesilla.common.plugins import load_class
from mesilla.containerizer.provisioner.backends.base import Backend
from mesilla.containerizer.provisioner.errors import BackendError, UnusableBackend

log = logging.getLogger(__name__)

BACKENDS = {
    "overlay": "mesilla.containerizer.provisioner.backends.overlay:OverlayBackend",
    "copy": "mesilla.containerizer.provisioner.backends.copy:CopyBackend",
    "bind": "mesilla.containerizer.provisioner.backends.bind:BindBackend",
}


def load_backend(name: str) -> type[Backend]:
    try:
        target = BACKENDS[name]
    except KeyError:
        raise UnusableBackend(
            f"Unknown --image_provisioner_backend '{name}' (known: {', '.join(BACKENDS)})"
        ) from None
    return load_class(target, Backend)


def choose_backend(name: str | None, store_dir: str) -> Backend:
    """The named backend after checking this host supports it; unnamed, Mesos's choice:
    overlay when the store's filesystem supports it, else copy."""
    if name:
        backend = load_backend(name)
        try:
            backend.check(store_dir)
        except BackendError as exc:  # the operator asked for it: a start-up error
            raise UnusableBackend(str(exc)) from exc
        return backend()
    overlay = load_backend("overlay")
    try:
        overlay.check(store_dir)
        return overlay()
    except BackendError as exc:
        log.info("Using the copy backend: %s", exc)
        return load_backend("copy")()
