"""The master's v0 JSON endpoints (``/state``, ``/slaves``, ``/tasks``, ...) in Mesos's shapes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mesilla.common.http import Router

if TYPE_CHECKING:
    from mesilla.master.master import Master


def install(router: Router, master: Master) -> None:
    """Registers the v0 endpoints on the master's router."""
