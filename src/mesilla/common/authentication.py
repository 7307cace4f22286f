"""HTTP authentication as Mesos does it (`docs/authentication.md`): realms, Basic.

Every route names its realm (`mesilla.common.http.Route.realm`). A realm whose
switch is on (`--authenticate_http_readonly` for ``mesos-master-readonly``, ...)
gets authenticators; a request to one of its routes must pass one of them, or
it is answered 401 with a ``WWW-Authenticate`` challenge per authenticator and
the reason, before its handler runs (so nothing changes). The principal found
is `principal_of(request)` for the handler (authorization, the scheduler API's
``FrameworkInfo.principal`` rule).

Credentials come from Mesos's files: JSON ``{"credentials": [{"principal": ..,
"secret": ..}]}`` or plain text, one ``principal secret`` per line, named by a
path (``/path`` or ``file:///path``) or given inline. Secrets are compared in
constant time and never logged; the flags that name them show the path.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from mesilla.common.errors import Unauthorized
from mesilla.common.flags import Flag, FlagError, Flags

log = logging.getLogger(__name__)

MASTER_READONLY = "mesos-master-readonly"
MASTER_READWRITE = "mesos-master-readwrite"
MASTER_SCHEDULER = "mesos-master-scheduler"
#: Mesilla's own: Mesos agents authenticate over libprocess (SASL), Mesilla's over HTTP.
MASTER_AGENT = "mesilla-master-agent"
AGENT_READONLY = "mesos-agent-readonly"
AGENT_READWRITE = "mesos-agent-readwrite"
AGENT_EXECUTOR = "mesos-agent-executor"



@dataclass(frozen=True)
class Principal:
    """Mesos's `Principal`: a value (Basic) and/or claims (an executor's token)."""

    value: str | None
    claims: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.value if self.value is not None else json.dumps(dict(self.claims))


_PRINCIPAL_KEY = web.RequestKey("principal", Principal)


def principal_of(request: web.Request) -> Principal | None:
    """The request's authenticated principal; None where its realm authenticates nobody."""
    return request.get(_PRINCIPAL_KEY)


# --- credentials files -----------------------------------------------------------


class CredentialsError(FlagError):
    """A credentials file that cannot be read; the message names it, never a secret."""


def _read_source(value: str, flag: str) -> tuple[str, str]:
    """The text of a credentials flag's value (inline, or a file) and where it came from."""
    if value.lstrip().startswith("{"):
        return value, "inline"
    path = value[len("file://") :] if value.startswith("file://") else value
    try:
        mode = os.stat(path).st_mode
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise CredentialsError(
            f"Cannot read --{flag} file '{path}': {exc.strerror}"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("Permissions on --%s file '%s' are too open: it should be 0600", flag, path)
    return text, path


def _pair(entry: Any, where: str) -> tuple[str, str]:
    if not isinstance(entry, dict):
        raise CredentialsError(f"{where}: expecting an object with 'principal' and 'secret'")
    principal, secret = entry.get("principal"), entry.get("secret", "")
    if not isinstance(principal, str) or not principal or not isinstance(secret, str):
        raise CredentialsError(f"{where}: expecting a string 'principal' and 'secret'")
    return principal, secret


def _text_pairs(text: str, where: str) -> list[tuple[str, str]]:
    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words:
            continue
        if len(words) != 2:
            raise CredentialsError(
                f"{where}: line {number} is not 'principal secret' (nor is the file JSON)"
            )
        pairs.append((words[0], words[1]))
    return pairs


def read_credentials(value: str, flag: str = "credentials") -> dict[str, str]:
    """Mesos's ``credentials::read``: the secrets of a credentials file, by principal."""
    text, where = _read_source(value, flag)
    where = f"--{flag} ({where})"
    try:
        doc = json.loads(text)
    except ValueError:
        return dict(_text_pairs(text, where))
    entries = doc.get("credentials") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise CredentialsError(f"{where}: expecting {{\"credentials\": [...]}}")
    return dict(_pair(entry, f"{where} 'credentials[{i}]'") for i, entry in enumerate(entries))


def read_credential(value: str, flag: str = "credential") -> tuple[str, str]:
    """Mesos's ``credentials::readCredential``: one ``{"principal", "secret"}`` or
    ``principal secret``, the agent's own to the master."""
    text, where = _read_source(value, flag)
    where = f"--{flag} ({where})"
    try:
        doc = json.loads(text)
    except ValueError:
        pairs = _text_pairs(text, where)
        if len(pairs) != 1:
            raise CredentialsError(f"{where}: expecting one 'principal secret' line") from None
        return pairs[0]
    return _pair(doc, where)


# --- authenticators ----------------------------------------------------------------


class Authenticator(Protocol):
    scheme: str

    def authenticate(self, request: web.Request) -> Principal | str:
        """The principal, or why the request's credentials do not pass."""


class BasicAuthenticator:
    """libprocess's ``BasicAuthenticator``: ``Authorization: Basic base64(principal:secret)``."""

    scheme = "Basic"

    def __init__(self, credentials: Mapping[str, str]) -> None:
        self._credentials = dict(credentials)

    def authenticate(self, request: web.Request) -> Principal | str:
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return "Missing 'Authorization: Basic' credentials"
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return "Malformed 'Authorization' header: expecting base64 of 'principal:secret'"
        principal, colon, secret = decoded.partition(":")
        if not colon:
            return "Malformed 'Authorization' header: expecting base64 of 'principal:secret'"
        expected = self._credentials.get(principal)
        # Compared even for an unknown principal, so that timing tells nothing.
        matches = hmac.compare_digest(
            secret.encode(), (expected if expected is not None else "\0" + secret).encode()
        )
        if expected is None or not matches:
            return "Unknown principal or wrong secret"
        return Principal(principal)


def basic_authorization(principal: str, secret: str) -> str:
    """The ``Authorization`` header's value for a principal's Basic credentials."""
    return "Basic " + base64.b64encode(f"{principal}:{secret}".encode()).decode()


class Authentication:
    """The authenticators of each realm that is switched on."""

    def __init__(self, realms: Mapping[str, Iterable[Authenticator]] | None = None) -> None:
        self._realms = {realm: list(found) for realm, found in (realms or {}).items()}

    def enabled(self, realm: str | None) -> bool:
        return realm in self._realms

    def try_authenticate(self, request: web.Request, realm: str) -> Principal | None:
        """The principal, or None where no authenticator of `realm` lets it pass."""
        for authenticator in self._realms.get(realm, ()):
            found = authenticator.authenticate(request)
            if isinstance(found, Principal):
                return found
        return None

    def authenticate(self, request: web.Request, realm: str | None) -> None:
        """Sets the request's principal, or raises 401; nothing for a realm that is off."""
        if realm is None or realm not in self._realms:
            return
        reasons = []
        for authenticator in self._realms[realm]:
            found = authenticator.authenticate(request)
            if isinstance(found, Principal):
                request[_PRINCIPAL_KEY] = found
                return
            reasons.append(found)
        challenges = ", ".join(f'{a.scheme} realm="{realm}"' for a in self._realms[realm])
        raise Unauthorized(
            f"Authentication for realm '{realm}' failed: {'; '.join(dict.fromkeys(reasons))}",
            headers={"WWW-Authenticate": challenges},
        )


# --- flags --------------------------------------------------------------------------


def _switch(name: str, help: str) -> Flag:
    return Flag(name, help, False, "bool")


def _http_authenticators(name: str, allowed: tuple[str, ...]) -> Flag:
    return Flag(
        name,
        f"HTTP authenticators, comma-separated: Mesilla has {', '.join(allowed)}.",
        "basic",
    )


MASTER_FLAGS: list[Flag] = [
    Flag(
        "credentials",
        "Credentials of frameworks, agents and operators: a JSON or plain text file "
        "(/path or file:///path), or the JSON inline.",
        None,
        "path",
    ),
    _switch("authenticate_http_readonly", "Authenticate the read-only HTTP endpoints."),
    _switch("authenticate_http_readwrite", "Authenticate the HTTP endpoints that change state."),
    _switch("authenticate_http_frameworks", "Authenticate HTTP frameworks (the scheduler API)."),
    _switch(
        "authenticate_frameworks",
        "Only authenticated frameworks may register: the scheduler API's with HTTP "
        "credentials, v0 (libprocess) frameworks with CRAM-MD5 against --credentials.",
    ),
    _switch("authenticate_agents", "Only authenticated agents may register."),
    Flag(
        "authenticators",
        "The authenticator of v0 (libprocess) frameworks: Mesilla has crammd5, as Mesos ships.",
        "crammd5",
    ),
    _http_authenticators("http_authenticators", ("basic",)),
    _http_authenticators("http_framework_authenticators", ("basic",)),
]

AGENT_FLAGS: list[Flag] = [
    Flag(
        "http_credentials",
        "Credentials of the agent's HTTP endpoints: a JSON file (/path or file:///path), "
        "or the JSON inline.",
        None,
        "path",
    ),
    Flag(
        "credential",
        "The agent's own credential to the master (--authenticate_agents): a JSON "
        '{"principal", "secret"} or a "principal secret" file.',
        None,
        "path",
    ),
    _switch("authenticate_http_readonly", "Authenticate the read-only HTTP endpoints."),
    _switch("authenticate_http_readwrite", "Authenticate the HTTP endpoints that change state."),
    _switch(
        "authenticate_http_executors",
        "Give each executor a token (MESOS_EXECUTOR_AUTHENTICATION_TOKEN) and require it "
        "on the executor API; it passes the read-write realm too, confined to its containers.",
    ),
    Flag("jwt_secret_key", "The file of the key executors' tokens are signed with (HS256).", None, "path"),
    _http_authenticators("http_authenticators", ("basic", "jwt")),
]


def _check_authenticators(flags: Flags, name: str, allowed: Iterable[str]) -> None:
    names = [part.strip() for part in str(flags.get(name) or "basic").split(",") if part.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise FlagError(
            f"Unknown --{name} {', '.join(unknown)}: Mesilla has {', '.join(allowed)}"
        )


def _basic(flags: Flags, flag: str, realms: list[str]) -> list[Authenticator]:
    if not realms:
        return []
    value = flags.get(flag)
    if value is None:
        raise FlagError(
            f"No credentials provided for the default 'basic' HTTP authenticator: "
            f"--{flag} is needed with --{' --'.join(realms)}"
        )
    return [BasicAuthenticator(read_credentials(value, flag))]


def master_authentication(flags: Flags) -> Authentication:
    _check_authenticators(flags, "http_authenticators", ("basic",))
    _check_authenticators(flags, "http_framework_authenticators", ("basic",))
    _check_authenticators(flags, "authenticators", ("crammd5",))
    switches = {
        MASTER_READONLY: flags.get("authenticate_http_readonly"),
        MASTER_READWRITE: flags.get("authenticate_http_readwrite"),
        MASTER_SCHEDULER: flags.get("authenticate_http_frameworks")
        or flags.get("authenticate_frameworks"),
        MASTER_AGENT: flags.get("authenticate_agents"),
    }
    on = [realm for realm, value in switches.items() if value]
    names = [
        {MASTER_SCHEDULER: "authenticate_http_frameworks", MASTER_AGENT: "authenticate_agents"}.get(
            realm, "authenticate_http_" + realm.rsplit("-", 1)[1]
        )
        for realm in on
    ]
    basic = _basic(flags, "credentials", names)
    return Authentication({realm: basic for realm in on})


def agent_authentication(
    flags: Flags, executor_authenticators: list[Authenticator] | None = None
) -> Authentication:
    """The agent's realms; an executor's token (`executor_authenticators`) also passes
    the read-write realm, where executors call the agent API, as in Mesos."""
    _check_authenticators(flags, "http_authenticators", ("basic", "jwt"))
    switches = {
        AGENT_READONLY: flags.get("authenticate_http_readonly"),
        AGENT_READWRITE: flags.get("authenticate_http_readwrite"),
    }
    on = [realm for realm, value in switches.items() if value]
    basic = _basic(flags, "http_credentials", ["authenticate_http_" + r.rsplit("-", 1)[1] for r in on])
    realms: dict[str, list[Authenticator]] = {realm: list(basic) for realm in on}
    if executor_authenticators:
        realms[AGENT_EXECUTOR] = list(executor_authenticators)
        if AGENT_READWRITE in realms:
            realms[AGENT_READWRITE] += executor_authenticators
    return Authentication(realms)


def agent_http_credentials(flags: Flags) -> dict[str, str]:
    """--http_credentials by principal (empty without it)."""
    value = flags.get("http_credentials")
    return {} if value is None else read_credentials(value, "http_credentials")


def agent_credential(flags: Flags) -> tuple[str, str] | None:
    """The agent's principal and secret to the master, when it has --credential."""
    value = flags.get("credential")
    return None if value is None else read_credential(value)
