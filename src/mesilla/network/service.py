"""The Neutron v2.0 API subset over the book: networks, subnets, ports, trunks (HTTP routes).

Shapes follow Neutron: ``{"network": {...}}`` to create one, ``{"networks":
[...]}`` to create several at once (all or none), lists filtered by any
attribute (``?name=a&network_id=x``; a key given twice matches either value;
``fixed_ips=ip_address=X``; ``tags``/``tags-any``), ``fields=`` to select,
``limit``/``marker`` pages with ``<collection>_links``, ``sort_key``/
``sort_dir``. Errors are ``{"NeutronError": {"type", "message", "detail"}}``.
``GET /`` and ``GET /v2.0`` are the version and resource documents that
openstacksdk's discovery reads; the service may be mounted under a prefix
(the master's ``/network``), which every link it writes carries.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from typing import Any

import msgspec
from aiohttp import web

from mesilla.common.http import Router
from mesilla.network import access, attributes, errors
from mesilla.network.database import Database
from mesilla.network.store import Book, Doc

log = logging.getLogger(__name__)

COLLECTIONS = {"networks": "network", "subnets": "subnet", "ports": "port", "trunks": "trunk"}
BULK = {"networks", "subnets", "ports"}
#: Attributes every resource shows beyond those a request may set.
_SHOWN = {"id", "status", "created_at", "updated_at", "revision_number"}
_DERIVED = {"network": {"subnets"}, "port": {"binding:vif_type", "binding:vif_details"},
            "subnet": {"subnetpool_id", "segment_id", "service_types"}, "trunk": set()}
_PAGING = {"fields", "limit", "marker", "sort_key", "sort_dir", "page_reverse"}
_TAG_FILTERS = {"tags", "tags-any", "not-tags", "not-tags-any"}

EXTENSIONS = [
    ("trunk", "Trunk Extension", "Provides support for trunk ports"),
    ("trunk-details", "Trunk port details", "Expose trunk port details"),
    ("binding", "Port Binding", "Expose port bindings of a virtual port to external application"),
    ("standard-attr-tag", "Tag support for resources", "Enables to set tag on resources"),
    ("standard-attr-timestamp", "Resource timestamps", "created_at and updated_at"),
    ("standard-attr-revisions", "Resource revision numbers", "revision_number"),
    ("standard-attr-description", "standard-attr-description", "description on resources"),
    ("project-id", "project_id field enabled", "project_id alongside tenant_id"),
    ("port-security", "Port Security", "Provides port security"),
    ("mesilla-trunk-tokens", "Trunk-scoped tokens",
     "POST /v2.0/mesilla/trunk_tokens: a token that may manage one trunk's subports only"),
]


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=msgspec.json.encode(body), content_type="application/json")


class NetworkService:
    def __init__(self, book: Book) -> None:
        self.book = book

    @classmethod
    async def in_work_dir(cls, work_dir: str) -> NetworkService:
        return cls(await Book.open(Database.in_work_dir(work_dir)))

    async def close(self) -> None:
        await self.book.close()

    def install(self, router: Router, prefix: str = "/network") -> None:
        """Serves the API under `prefix` of a Mesilla daemon's router (the master's)."""
        async def handler(request: web.Request) -> web.Response:
            tail = request.path.split(prefix, 1)[1]
            return await self.handle(request, tail, request.path[: len(request.path) - len(tail)])

        router.add(prefix, handler, methods=("GET", "POST", "PUT", "DELETE"))

    def app(self) -> web.Application:
        """The API alone, at ``/`` (`mesilla network`)."""
        async def handler(request: web.Request) -> web.Response:
            return await self.handle(request, request.path, "")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        return app

    async def handle(self, request: web.Request, path: str, mount: str) -> web.Response:
        """Answers `path` (below the mount point `mount`, e.g. ``/network``)."""
        base = f"{request.scheme}://{request.host}{mount.rstrip('/')}"
        try:
            return await self._dispatch(request, path, base)
        except errors.NeutronError as exc:
            if exc.status >= 500:
                log.error("%s %s: %s", request.method, request.path, exc.message)
            return _json(exc.body(), exc.status)

    async def _dispatch(self, request: web.Request, path: str, base: str) -> web.Response:
        segments = [s for s in path.split("/") if s]
        if segments and segments[-1].endswith(".json"):
            segments[-1] = segments[-1][: -len(".json")]
        method = request.method
        if method == "GET" and segments in ([], ["v2.0"]):
            return _json(self._versions(base) if not segments else self._resources(base))
        if method == "GET" and segments[:2] == ["v2.0", "extensions"] and len(segments) <= 3:
            return self._extensions(segments[2:])
        body = await self._body(request) if method in ("POST", "PUT") else None
        principal = access.principal_of(request, self.book)
        access.check(principal, method, segments, body, self.book)
        match segments:
            case ["v2.0", "mesilla", "trunk_tokens"] if method == "POST":
                return await self._mint_token(body)
            case ["v2.0", collection] if collection in COLLECTIONS:
                if method == "GET":
                    return self._list(request, collection)
                if method == "POST":
                    return await self._create(collection, body)
            case ["v2.0", collection, key] if collection in COLLECTIONS:
                resource = COLLECTIONS[collection]
                if method == "GET":
                    return _json({resource: _select(self._show(resource, key), request)})
                if method == "PUT":
                    changes = attributes.parse_update(resource, _unwrap(body, resource))
                    doc = await self.book.update(resource, self._find(resource, key)["id"], changes)
                    return _json({resource: self.book.view(resource, doc)})
                if method == "DELETE":
                    await self._delete(resource, key)
                    return web.Response(status=204)
            case ["v2.0", "trunks", key, "add_subports" | "remove_subports" as action] if method == "PUT":
                subs = body.get("sub_ports") if isinstance(body, dict) else None
                if not isinstance(subs, list):
                    raise errors.HTTPBadRequest("Unable to find 'sub_ports' in request body")
                if action == "add_subports":
                    trunk = await self.book.add_subports(key, subs)
                else:
                    trunk = await self.book.remove_subports(key, subs)
                # Unwrapped, as Neutron answers these two.
                return _json(self.book.view("trunk", trunk))
            case ["v2.0", "trunks", key, "get_subports"] if method == "GET":
                return _json({"sub_ports": self.book.trunk(key)["sub_ports"]})
            case _:
                if not self._known_path(segments):
                    raise errors.HTTPNotFound(f"The resource could not be found: /{'/'.join(segments)}")
        raise errors.HTTPMethodNotAllowed(f"{method} is not allowed on /{'/'.join(segments)}")

    @staticmethod
    def _known_path(segments: list[str]) -> bool:
        match segments:
            case ["v2.0", "mesilla", "trunk_tokens"] | ["v2.0", "extensions", *_]:
                return True
            case ["v2.0", c] | ["v2.0", c, _] if c in COLLECTIONS:
                return True
            case ["v2.0", "trunks", _, "add_subports" | "remove_subports" | "get_subports"]:
                return True
        return False

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError:
            raise errors.HTTPBadRequest("Malformed request body: it is not JSON") from None

    # --- documents -------------------------------------------------------------------

    @staticmethod
    def _versions(base: str) -> Doc:
        return {"versions": [{"id": "v2.0", "status": "CURRENT",
                              "links": [{"href": f"{base}/v2.0/", "rel": "self"}]}]}

    @staticmethod
    def _resources(base: str) -> Doc:
        return {"resources": [
            {"name": resource, "collection": collection,
             "links": [{"href": f"{base}/v2.0/{collection}", "rel": "self"}]}
            for collection, resource in COLLECTIONS.items()
        ]}

    @staticmethod
    def _extensions(alias: list[str]) -> web.Response:
        docs = {a: {"alias": a, "name": n, "description": d, "links": [],
                    "updated": "2026-12-01T00:00:00-00:00"} for a, n, d in EXTENSIONS}
        if not alias:
            return _json({"extensions": list(docs.values())})
        if alias[0] not in docs:
            raise errors.NotFound(f"Extension with alias {alias[0]} does not exist")
        return _json({"extension": docs[alias[0]]})

    # --- resources -------------------------------------------------------------------

    def _find(self, resource: str, key: str) -> Doc:
        lookups = {"network": self.book.network, "subnet": self.book.subnet,
                   "port": self.book.port, "trunk": self.book.trunk}
        return lookups[resource](key)

    def _show(self, resource: str, key: str) -> Doc:
        return self.book.view(resource, self._find(resource, key))

    def _list(self, request: web.Request, collection: str) -> web.Response:
        resource = COLLECTIONS[collection]
        filters: dict[str, list[str]] = defaultdict(list)
        for name, value in request.query.items():
            if name not in _PAGING:
                filters[name].append(value)
        known = set(attributes.RESOURCES[resource]) | _SHOWN | _DERIVED[resource] | _TAG_FILTERS
        for name in filters:
            if name not in known:
                raise errors.HTTPBadRequest(f"{name} is invalid attribute for filtering")
        views = [self.book.view(resource, doc) for doc in self.book.tables[collection].values()]
        views = [v for v in views if all(_matches(v, k, vs) for k, vs in filters.items())]
        views = _sorted(views, request.query.getall("sort_key", []), request.query.getall("sort_dir", []))
        page: Doc = {}
        limit = request.query.get("limit")
        marker = request.query.get("marker")
        if marker is not None:
            ids = [v["id"] for v in views]
            views = views[ids.index(marker) + 1:] if marker in ids else []
        if limit is not None:
            try:
                size = int(limit)
            except ValueError:
                raise errors.HTTPBadRequest(f"Invalid input for limit: '{limit}' is not an integer") from None
            if size > 0 and len(views) > size:
                views = views[:size]
                href = str(request.url.update_query(marker=views[-1]["id"]))
                page[f"{collection}_links"] = [{"rel": "next", "href": href}]
        return _json({collection: [_select(v, request) for v in views], **page})

    async def _create(self, collection: str, body: Any) -> web.Response:
        resource = COLLECTIONS[collection]
        bulk = isinstance(body, dict) and collection in body and resource not in body
        if bulk and collection not in BULK:
            raise errors.HTTPBadRequest(f"Bulk operation not supported for {collection}")
        if bulk:
            items = body[collection]
            if not isinstance(items, list) or not items:
                raise errors.HTTPBadRequest(f"Resources required: '{collection}' must be a non-empty list")
        else:
            items = [_unwrap(body, resource)]
        specs = [attributes.parse_create(resource, item) for item in items]
        created: list[Doc]
        if resource == "network":
            created = await self.book.create_networks(specs)
        elif resource == "subnet":
            created = await self.book.create_subnets(specs)
        elif resource == "port":
            created = await self.book.create_ports(specs)
        else:
            created = [await self.book.create_trunk(specs[0])]
        views = [self.book.view(resource, doc) for doc in created]
        return _json({collection: views} if bulk else {resource: views[0]}, 201)

    async def _delete(self, resource: str, key: str) -> None:
        doc_id = self._find(resource, key)["id"]
        deletes = {"network": self.book.delete_network, "subnet": self.book.delete_subnet,
                   "port": self.book.delete_port, "trunk": self.book.delete_trunk}
        await deletes[resource](doc_id)

    async def _mint_token(self, body: Any) -> web.Response:
        if not isinstance(body, dict) or not isinstance(body.get("trunk_id"), str):
            raise errors.HTTPBadRequest("Expecting {\"trunk_id\": \"<trunk id>\"} in the request body")
        token = await self.book.mint_trunk_token(body["trunk_id"])
        return _json({"token": token, "trunk_id": body["trunk_id"]}, 201)


def _unwrap(body: Any, resource: str) -> Any:
    if not isinstance(body, dict) or resource not in body:
        raise errors.HTTPBadRequest(f"Unable to find '{resource}' in request body")
    return body[resource]


def _select(view: Doc, request: web.Request) -> Doc:
    fields = [f for value in request.query.getall("fields", []) for f in value.split(",") if f]
    return {k: view[k] for k in fields if k in view} if fields else view


def _same(actual: Any, wanted: str) -> bool:
    if isinstance(actual, bool):
        return wanted.lower() in (("true", "1") if actual else ("false", "0"))
    if actual is None:
        return wanted in ("", "None", "null")
    if isinstance(actual, list):
        return any(_same(item, wanted) for item in actual)
    return str(actual) == wanted


def _matches(view: Doc, name: str, wanted: list[str]) -> bool:
    if name in _TAG_FILTERS:
        tags = set(view.get("tags", []))
        asked = {t for value in wanted for t in value.split(",") if t}
        result = asked <= tags if name in ("tags", "not-tags") else bool(asked & tags)
        return not result if name.startswith("not-") else result
    if name == "fixed_ips":
        # fixed_ips=ip_address=X&fixed_ips=subnet_id=S: an address among X's, in a subnet among S's.
        wanted_by: dict[str, set[str]] = defaultdict(set)
        for value in wanted:
            key, _, text = value.partition("=")
            wanted_by[key].add(text)
        return any(all(fixed.get(k) in vs for k, vs in wanted_by.items()) for fixed in view["fixed_ips"])
    actual = view.get(name)
    return any(_same(actual, w) for w in wanted)


def _sorted(views: list[Doc], keys: list[str], dirs: list[str]) -> list[Doc]:
    for index in reversed(range(len(keys))):
        direction = dirs[index] if index < len(dirs) else "asc"
        if direction not in ("asc", "desc"):
            raise errors.HTTPBadRequest(f"Invalid input for sort_dir: '{direction}' is not asc or desc")
        key = keys[index]
        views = sorted(views, key=lambda v: (v.get(key) is not None, str(v.get(key))),
                       reverse=direction == "desc")
    return views
