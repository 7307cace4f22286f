"""Who may do what: admins everything; a trunk's scoped token only that trunk's subports.

The seed's first security option: credentials stay with the service. An
admin mints a token scoped to one trunk (``POST /v2.0/mesilla/trunk_tokens``)
and hands it to the agent of the host that trunk serves. A request whose
``X-Auth-Token`` is such a token may only:

* ``GET /v2.0/trunks/<its trunk>/get_subports``;
* ``PUT /v2.0/trunks/<its trunk>/add_subports`` with ports whose
  ``device_owner`` is ``trunk:subport`` (it cannot pull another host's or a
  VM's port onto its trunk), and ``.../remove_subports``;
* ``POST /v2.0/ports`` (one or bulk) where every port has ``device_owner``
  ``trunk:subport``;
* ``DELETE /v2.0/ports/<id>`` of a ``trunk:subport`` port attached to no
  trunk or to its own (the book refuses the latter with 409 until removed);
* ``PUT /v2.0/ports/<id>`` changing only the ``name`` of a subport of its
  trunk (the agent names a port it took from a pool for its pod);
* ``GET /v2.0/networks/<id>`` and ``GET /v2.0/subnets/<id>`` (one, by id: what
  an agent needs to plumb a pod, the MTU, prefix length and gateway of the
  port it got; lists stay an admin's).

Anything else answers 403 ``HTTPForbidden``, and so does any request with a
trunk token that is unknown or was revoked (deleting a trunk revokes its
tokens). The version and extension
documents (``GET /``, ``/v2.0``, ``/v2.0/extensions``) answer everyone, as
Neutron's do, so that clients can discover the API with any token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from mesilla.common.authentication import MASTER_READWRITE
from mesilla.common.http import AUTHENTICATION
from mesilla.network import errors
from mesilla.network.store import SUBPORT_OWNER, TOKEN_PREFIX, Book


@dataclass(frozen=True)
class Principal:
    #: The trunk a scoped token may manage; None for an admin.
    trunk_id: str | None = None

    @property
    def admin(self) -> bool:
        return self.trunk_id is None


ADMIN = Principal()


def is_admin(request: web.Request) -> bool:
    """Whether a request without a scoped token is an admin's.

    While the master does not authenticate its read-write realm every such
    request is (openstacksdk's ``auth_type=none`` sends ``X-Auth-Token: notused``
    or nothing); with ``--authenticate_http_readwrite`` an admin is a request
    with a principal's valid Basic credentials. The standalone service (no
    master) has no authentication.
    """
    authentication = request.app.get(AUTHENTICATION)
    if authentication is None or not authentication.enabled(MASTER_READWRITE):
        return True
    return authentication.try_authenticate(request, MASTER_READWRITE) is not None


def principal_of(request: web.Request, book: Book) -> Principal:
    token = request.headers.get("X-Auth-Token")
    if token:
        trunk_id = book.trunk_of_token(token)
        if trunk_id is not None:
            return Principal(trunk_id)
        if token.startswith(TOKEN_PREFIX):
            # Revoked with its trunk: it must not turn into an admin's while auth is off.
            raise errors.HTTPForbidden("This trunk token is unknown or was revoked with its trunk")
    if not is_admin(request):
        raise errors.HTTPForbidden("This request needs an admin's credentials or a trunk token")
    return ADMIN


def _subport_owned(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("device_owner") == SUBPORT_OWNER


def check(principal: Principal, method: str, segments: list[str], body: Any, book: Book) -> None:
    """Raises 403 unless `principal` may make this request (see the module's rules)."""
    if principal.admin:
        return
    own = principal.trunk_id
    allowed = False
    match segments:
        case ["v2.0", "networks" | "subnets", _] if method == "GET":
            allowed = True
        case ["v2.0", "trunks", trunk_id, "get_subports"] if method == "GET":
            allowed = trunk_id == own
        case ["v2.0", "trunks", trunk_id, "remove_subports"] if method == "PUT":
            allowed = trunk_id == own
        case ["v2.0", "trunks", trunk_id, "add_subports"] if method == "PUT":
            subs = body.get("sub_ports") if isinstance(body, dict) else None
            allowed = trunk_id == own and isinstance(subs, list) and all(
                not isinstance(sub, dict)
                or str(sub.get("port_id")) not in book.ports  # the book answers 400/404
                or _subport_owned(book.ports[str(sub["port_id"])])
                for sub in subs
            )
        case ["v2.0", "ports"] if method == "POST":
            ports = None
            if isinstance(body, dict):
                ports = [body["port"]] if "port" in body else body.get("ports")
            allowed = isinstance(ports, list) and all(_subport_owned(p) for p in ports)
        case ["v2.0", "ports", port_id] if method == "DELETE":
            port = book.ports.get(port_id)
            allowed = port is None or (
                _subport_owned(port) and port["device_id"] in ("", own)
            )
        case ["v2.0", "ports", port_id] if method == "PUT":
            port = book.ports.get(port_id)
            changes = body.get("port") if isinstance(body, dict) else None
            allowed = (port is None or book.trunk_of_subport(port_id) == own) and (
                isinstance(changes, dict) and set(changes) == {"name"} and set(body) == {"port"}
            )
    if not allowed:
        raise errors.HTTPForbidden(
            f"A token scoped to trunk {own} may only manage that trunk's subports and the "
            f"{SUBPORT_OWNER} ports they use, not {method} /{'/'.join(segments)}"
        )
