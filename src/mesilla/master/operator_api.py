"""The master's operator API: ``POST /api/v1`` (Mesos's v1 master Call/Response)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mesilla.common.http import Router

if TYPE_CHECKING:
    from mesilla.master.master import Master


def install(router: Router, master: Master) -> None:
    """Registers ``/api/v1`` on the master's router."""
