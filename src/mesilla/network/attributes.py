"""The attributes of each Neutron resource: which a request may set, their defaults and checks.

Neutron's API layer (its "attribute maps") refuses an unknown attribute, a
missing required one and a malformed value with 400 ``HTTPBadRequest``
before the plugin sees the request; `parse_create` and `parse_update` do the
same here and hand the book plain, converted values. What depends on the
book (does the network exist, is the address free) is the book's to check.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mesilla.network import errors

Converter = Callable[[str, Any], Any]

REQUIRED = object()


def _bad(name: str, value: Any, reason: str) -> errors.HTTPBadRequest:
    return errors.HTTPBadRequest(f"Invalid input for {name}. Reason: '{value}' {reason}.")


def string(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _bad(name, value, "is not a valid string")
    if len(value) > 255:
        raise _bad(name, value[:32] + "...", "exceeds maximum length of 255")
    return value


def nullable_string(name: str, value: Any) -> str | None:
    return None if value is None else string(name, value)


def boolean(name: str, value: Any) -> bool:
    # Neutron's convert_to_boolean: JSON booleans, 0/1 and their strings.
    if isinstance(value, bool):
        return value
    if value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "0", "1"):
        return value.lower() in ("true", "1")
    raise _bad(name, value, "cannot be converted to boolean")


def uuid_string(name: str, value: Any) -> str:
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise _bad(name, value, "is not a valid UUID")


def positive_int(name: str, value: Any) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(name, value, "is not a valid non-negative integer")
    return value


def string_list(name: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(name, value, "is not a list of strings")
    if len(set(value)) != len(value):
        raise _bad(name, value, "contains duplicates")
    return list(value)


def dict_list(name: str, value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise _bad(name, value, "is not a list of objects")
    return list(value)


def mapping(name: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(name, value, "is not a dictionary")
    return dict(value)


def anything(name: str, value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Attr:
    convert: Converter
    default: Any = None  # REQUIRED, a value, or a callable giving a fresh one
    put: bool = False  # may an update change it


def _common(put_name: bool = True) -> dict[str, Attr]:
    return {
        "name": Attr(string, "", put=put_name),
        "description": Attr(string, "", put=True),
        "project_id": Attr(string, ""),
        "tenant_id": Attr(string, ""),
        "tags": Attr(string_list, list, put=True),
    }


RESOURCES: dict[str, dict[str, Attr]] = {
    "network": {
        **_common(),
        "admin_state_up": Attr(boolean, True, put=True),
        "shared": Attr(boolean, False),
        "mtu": Attr(positive_int, 1500, put=True),
        "port_security_enabled": Attr(boolean, True, put=True),
        "router:external": Attr(boolean, False),
        "availability_zone_hints": Attr(string_list, list),
    },
    "subnet": {
        **_common(),
        "network_id": Attr(uuid_string, REQUIRED),
        "ip_version": Attr(positive_int, REQUIRED),
        "cidr": Attr(string, REQUIRED),
        # Absent: the subnet's first address; null: no gateway (the book tells them apart).
        "gateway_ip": Attr(anything, REQUIRED),
        "allocation_pools": Attr(dict_list, None),
        "dns_nameservers": Attr(string_list, list, put=True),
        "host_routes": Attr(dict_list, list, put=True),
        "enable_dhcp": Attr(boolean, True, put=True),
        "ipv6_ra_mode": Attr(nullable_string, None),
        "ipv6_address_mode": Attr(nullable_string, None),
    },
    "port": {
        **_common(),
        "network_id": Attr(uuid_string, REQUIRED),
        "admin_state_up": Attr(boolean, True, put=True),
        "mac_address": Attr(string, None),
        "fixed_ips": Attr(dict_list, None),
        "device_id": Attr(string, "", put=True),
        "device_owner": Attr(string, "", put=True),
        "binding:host_id": Attr(string, "", put=True),
        "binding:profile": Attr(mapping, dict, put=True),
        "binding:vnic_type": Attr(string, "normal", put=True),
        "security_groups": Attr(string_list, list, put=True),
        "port_security_enabled": Attr(boolean, True, put=True),
        "allowed_address_pairs": Attr(dict_list, list, put=True),
    },
    "trunk": {
        **_common(),
        "port_id": Attr(uuid_string, REQUIRED),
        "admin_state_up": Attr(boolean, True, put=True),
        "sub_ports": Attr(dict_list, list),
    },
}

# Attributes clients may send that mean nothing without an attribute of their own
# here: subnetpool_id and segment_id name resources this service does not have.
_UNSUPPORTED = {"subnetpool_id", "segment_id", "use_default_subnetpool", "prefixlen"}


def parse_create(resource: str, body: Any) -> dict[str, Any]:
    """A create request's attributes, with defaults filled in; REQUIRED stays for gateway_ip."""
    spec = RESOURCES[resource]
    if not isinstance(body, dict):
        raise errors.HTTPBadRequest(f"Invalid format for {resource}: expecting an object")
    _check_known(resource, body, spec)
    values: dict[str, Any] = {}
    for name, attr in spec.items():
        if name in body:
            values[name] = attr.convert(name, body[name])
        elif attr.default is REQUIRED:
            if name == "gateway_ip":
                continue
            raise errors.HTTPBadRequest(
                f"Failed to parse request. Required attribute '{name}' not specified"
            )
        else:
            values[name] = attr.default() if callable(attr.default) else attr.default
    # Neutron keeps the two names of the owner in step.
    owner = values.get("project_id") or values.get("tenant_id") or ""
    values["project_id"] = values["tenant_id"] = owner
    return values


def parse_update(resource: str, body: Any) -> dict[str, Any]:
    spec = RESOURCES[resource]
    if not isinstance(body, dict):
        raise errors.HTTPBadRequest(f"Invalid format for {resource}: expecting an object")
    _check_known(resource, body, spec)
    values = {}
    for name, value in body.items():
        if not spec[name].put:
            raise errors.HTTPBadRequest(f"Cannot update read-only attribute {name}")
        values[name] = spec[name].convert(name, value)
    return values


def _check_known(resource: str, body: dict[str, Any], spec: dict[str, Attr]) -> None:
    unsupported = sorted(set(body) & _UNSUPPORTED)
    if unsupported:
        raise errors.HTTPBadRequest(
            f"Attribute(s) {', '.join(unsupported)} of {resource} are not supported by this service"
        )
    unknown = sorted(set(body) - set(spec))
    if unknown:
        raise errors.HTTPBadRequest(f"Unrecognized attribute(s) '{', '.join(unknown)}'")
