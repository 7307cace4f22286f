"""Authentication of v0 frameworks, as Mesos's master does it (`Master::authenticate`,
`src/authentication/cram_md5/authenticator.cpp`), with CRAM-MD5 against ``--credentials``.

The framework's driver runs an authenticatee, a libprocess process of its own,
which sends ``AuthenticateMessage{pid: <the framework's UPID>}``. The master
answers the authenticatee with ``AuthenticationMechanismsMessage`` (CRAM-MD5),
the authenticatee picks it with ``AuthenticationStartMessage``, the master sends
its challenge as an ``AuthenticationStepMessage`` and the authenticatee answers
with another; the master ends with ``AuthenticationCompletedMessage`` (the
framework's UPID is then authenticated as the principal),
``AuthenticationFailedMessage`` (wrong credentials) or
``AuthenticationErrorMessage`` (a message out of turn). A session not completed
within `TIMEOUT` is discarded. With ``--authenticate_frameworks`` only an
authenticated UPID may register, and a principal it names must be the one it
authenticated as (`admit`).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from dataclasses import dataclass, field
from typing import Any

from mesilla.common import libprocess
from mesilla.common.authentication import read_credentials
from mesilla.common.cram_md5 import MECHANISM, CramMD5Server
from mesilla.common.errors import BadRequest, Forbidden, Unauthorized
from mesilla.master.master import Master
from mesilla.v1.proto import v0

log = logging.getLogger(__name__)

MESSAGES = ("AuthenticateMessage", "AuthenticationStartMessage", "AuthenticationStepMessage")
TIMEOUT = 15.0  # Mesos's --authentication_v0_timeout default


@dataclass
class _Session:
    framework: libprocess.UPID  # the UPID being authenticated
    link: libprocess.Link  # to the authenticatee
    server: CramMD5Server
    stepping: bool = False  # the challenge is out
    expiry: asyncio.Task[None] | None = field(default=None, repr=False)


class V0Authenticator:
    def __init__(self, master: Master) -> None:
        self.master = master
        value = master.flags.get("credentials")
        self._credentials = read_credentials(value) if value else None
        self.authenticated: dict[libprocess.UPID, str] = {}  # framework UPID -> principal
        self._sessions: dict[libprocess.UPID, _Session] = {}  # by the authenticatee's UPID

    async def handle(self, sender: libprocess.UPID, name: str, message: dict[str, Any]) -> None:
        if name == "AuthenticateMessage":
            self._start(sender, message)
            return
        session = self._sessions.get(sender)
        if session is None:
            raise BadRequest("no authentication in progress from this UPID")
        if name == "AuthenticationStartMessage" and not session.stepping:
            if message["mechanism"] != MECHANISM:
                self._error(sender, f"Unsupported authentication mechanism '{message['mechanism']}'")
                return
            session.stepping = True
            challenge = base64.b64encode(session.server.challenge).decode()
            _send(session.link, "AuthenticationStepMessage", {"data": challenge})
        elif name == "AuthenticationStepMessage" and session.stepping:
            principal = session.server.verify(base64.b64decode(message.get("data", "")))
            if principal is None:
                log.info("authentication of %s failed: invalid credentials", session.framework)
                self._end(sender, "AuthenticationFailedMessage", {})
                return
            log.info("authenticated principal '%s' at %s", principal, session.framework)
            self.authenticated[session.framework] = principal
            self._end(sender, "AuthenticationCompletedMessage", {})
        else:
            kind = "start" if name == "AuthenticationStartMessage" else "step"
            self._error(sender, f"Unexpected authentication '{kind}' received")

    def admit(self, pid: libprocess.UPID, info: dict[str, Any]) -> dict[str, Any] | None:
        """The FrameworkInfo the framework at `pid` registers with (an authenticated one
        is its principal's), or None when it may not (now): then it is sent
        FrameworkErrorMessage, unless its authentication is still in progress."""
        if any(s.framework == pid for s in self._sessions.values()):
            # Mesos queues the registration until then; the driver's retry comes after it.
            log.info("dropping the registration of %s: its authentication is in progress", pid)
            return None
        try:
            self._validate_authentication(pid, info)
        except (Unauthorized, Forbidden) as exc:
            log.info("refusing the framework at %s: %s", pid, exc.reason)
            link = self._link(pid)
            _send(link, "FrameworkErrorMessage", {"message": exc.reason})
            link.close()
            return None
        principal = self.authenticated.get(pid)
        return info if principal is None else {**info, "principal": principal}

    def _validate_authentication(self, pid: libprocess.UPID, info: dict[str, Any]) -> None:
        """Mesos's `validateFrameworkAuthentication`: Unauthorized when the framework must
        authenticate and has not, Forbidden when it claims another principal than its own."""
        principal = self.authenticated.get(pid)
        if principal is None and self.master.flags.get("authenticate_frameworks"):
            raise Unauthorized(f"Framework at {pid} is not authenticated")
        if principal is not None and info.get("principal") not in (None, principal):
            raise Forbidden(
                f"Framework principal '{info['principal']}' does not match "
                f"authenticated principal '{principal}'"
            )

    def _start(self, sender: libprocess.UPID, message: dict[str, Any]) -> None:
        framework = libprocess.UPID.parse(message["pid"])
        if framework is None:
            raise BadRequest(f"malformed pid '{message['pid']}'")
        self.authenticated.pop(framework, None)
        for other in [a for a, s in self._sessions.items() if a == sender or s.framework == framework]:
            self._end(other, None, {})  # re-authentication discards the one outstanding
        link = self._link(sender)
        if self._credentials is None:
            _send(link, "AuthenticationErrorMessage", {"error": "No authenticator loaded"})
            link.close()
            return
        session = _Session(framework, link, CramMD5Server(self._credentials))
        self._sessions[sender] = session
        session.expiry = self.master.owner.spawn(self._expire(sender, session), f"authentication of {sender}")
        log.info("authenticating %s", framework)
        _send(link, "AuthenticationMechanismsMessage", {"mechanisms": [MECHANISM]})

    def _link(self, peer: libprocess.UPID) -> libprocess.Link:
        owner = self.master.owner
        return libprocess.Link(
            self.master.master_info.pid or "", peer, lambda coro: owner.spawn(coro, f"link to {peer}")
        )

    async def _expire(self, sender: libprocess.UPID, session: _Session) -> None:
        await asyncio.sleep(TIMEOUT)
        if self._sessions.get(sender) is session:
            log.warning("authentication of %s timed out", session.framework)
            self._end(sender, None, {})

    def _end(self, sender: libprocess.UPID, name: str | None, message: dict[str, Any]) -> None:
        """Ends `sender`'s session, with its last message `name` if any."""
        session = self._sessions.pop(sender)
        if name is not None:
            _send(session.link, name, message)
        session.link.close()
        if session.expiry is not None and session.expiry is not asyncio.current_task():
            session.expiry.cancel()

    def _error(self, sender: libprocess.UPID, error: str) -> None:
        self._end(sender, "AuthenticationErrorMessage", {"error": error})


def _send(link: libprocess.Link, name: str, message: dict[str, Any]) -> None:
    link.send(v0.INTERNAL + name, v0.encode(name, message))
