"""Mesilla's exceptions: one tree, so that the type says who is at fault and what follows.

    MesillaError
    ├── ConfigurationError        the daemon cannot start as configured: `mesilla <daemon>`
    │   │                         prints the one-line message and exits 1 (no traceback)
    │   ├── FlagError             a flag unknown, malformed or missing (common/flags.py)
    │   │   └── CredentialsError  a credentials file that cannot be read (common/authentication.py)
    │   ├── IsolationError        --isolation names an unknown isolator, or two filesystems
    │   │                         (containerizer/isolators)
    │   ├── UnknownLauncher       --launcher names an unknown launcher (containerizer/launcher)
    │   ├── NoOciRuntime          the linux launcher finds no OCI runtime that works here
    │   └── UnusableBackend, UnsupportedImageProviders   the provisioner's flags
    │                             (containerizer/provisioner/errors.py)
    ├── HttpError                 a request that cannot be served: `status`, `reason` and,
    │   │                         for bad input, the `field` at fault
    │   ├── BadRequest            400  malformed or invalid input; the message names the field
    │   ├── Unauthorized          401
    │   ├── Forbidden             403  e.g. a wrong Mesos-Stream-Id
    │   ├── NotFound              404  unknown container, file, ...
    │   ├── NotAcceptable         406
    │   ├── Conflict              409
    │   ├── PayloadTooLarge       413
    │   ├── UnsupportedMediaType  415
    │   ├── TemporaryRedirect     307  not the leading master
    │   └── ServiceUnavailable    503  no leader, still recovering
    ├── Closed                    the object was closed (by its owner): nothing new starts
    │                             (common/tasks.py)
    ├── ProvisionerError          an image that cannot be provisioned
    │                             (containerizer/provisioner/errors.py draws its subtree)
    └── (container errors)        a launch, destroy or lookup of a container that failed,
                                  each carrying its Mesos `TaskStatus.Reason` and the HTTP
                                  status the agent API answers with; defined at the end of
                                  this module

HTTP handlers raise HttpError; `mesilla.common.http` turns it into a plain-text
response in one place, so bad input is always a 4xx with a reason. Code that
translates a lower layer's failure raises one of these `from` it, so that the
original exception stays the cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    # Only named here: the executors import this module (TaskOwner's Closed), and the
    # v1 messages would bring msgspec into every pod's executor (~20 ms, ~1.5 MB).
    from mesilla.v1.mesos import ContainerID, Reason


class MesillaError(Exception):
    """Base of every error Mesilla raises on purpose."""


# --- configuration ------------------------------------------------------------


class ConfigurationError(MesillaError):
    """The daemon cannot start as configured; the message (one line) names the flag and the fix."""


# --- HTTP ---------------------------------------------------------------------


class HttpError(MesillaError):
    """A request that cannot be served, answered with `status` and `reason` as plain text.

    `field` names the part of the request at fault (e.g. `task_infos[0].task_id`)
    where there is one.
    """

    status: int = 500

    def __init__(
        self,
        reason: str = "",
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field
        self.headers = headers or {}


class BadRequest(HttpError):
    """Malformed or invalid input; the message names the field."""


class Unauthorized(HttpError):
    """No credentials, or credentials that do not authenticate."""


class Forbidden(HttpError):
    """Authenticated, but not allowed: e.g. a wrong Mesos-Stream-Id."""


class NotFound(HttpError):
    """No such container, file, framework, ..."""


class NotAcceptable(HttpError):
    """The client accepts none of the media types this endpoint answers in."""


class Conflict(HttpError):
    """The request contradicts the state: e.g. a second input attached to one container."""


class PayloadTooLarge(HttpError):
    """The body is larger than the endpoint reads."""


class UnsupportedMediaType(HttpError):
    """The body's Content-Type is not one the endpoint parses."""


class TemporaryRedirect(HttpError):
    """Not the leading master."""


class ServiceUnavailable(HttpError):
    """No leader yet, or still recovering."""


class _WithStatus(Protocol):
    status: int


def assign_statuses(statuses: Mapping[type[_WithStatus], int]) -> None:
    """Gives each error class its HTTP status from one table (its subclasses inherit it)."""
    for error, status in statuses.items():
        error.status = status


# The HTTP status of each class above: one table, read as the tree in this module's docstring.
assign_statuses({
    BadRequest: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    NotAcceptable: 406,
    Conflict: 409,
    PayloadTooLarge: 413,
    UnsupportedMediaType: 415,
    TemporaryRedirect: 307,
    ServiceUnavailable: 503,
})


# --- lifecycle ----------------------------------------------------------------


class Closed(MesillaError):
    """The object was closed, by whoever owns it; nothing new starts on it (trio's
    ClosedResourceError: the fault is on this side, not the other's)."""


# --- containers -----------------------------------------------------------------
#
#     ContainerError                 500  a container operation failed
#     ├── UnknownContainer           404  no such container (running or ended and kept)
#     ├── ContainerNotRemovable      500  REMOVE of a running container (as Mesos)
#     └── ContainerLaunchError       500  a launch failed at a step (a runc crash, ...)
#         ├── InvalidContainer       400  what was asked cannot be launched (the input)
#         └── ImageUnavailable       503  the image's registry failed; try again later
#
# Each carries the TaskStatus.Reason a task gets for it. The containerizer raises
# them with the lower error as `__cause__`; the agent (a task's status) and the
# agent API (an HTTP status, `http_error`) translate them once, at their edges.


class ContainerError(MesillaError):
    """A container operation that failed: `reason` for the task, `status` for the agent API."""

    reason: Reason | None = None
    status: int = 500

    def __init__(self, message: str, *, container_id: ContainerID | None = None) -> None:
        super().__init__(message)
        self.container_id = container_id

    def http_error(self) -> HttpError:
        """The agent API's answer: this error's status, with its message."""
        error = HttpError(str(self))
        error.status = self.status
        return error


class UnknownContainer(ContainerError):
    status = 404


class ContainerNotRemovable(ContainerError):
    """REMOVE of a container that has not ended (Mesos answers 500 Internal Server Error)."""


class ContainerLaunchError(ContainerError):
    """A launch failed at `step` (a ContainerState name) because of `cause`."""

    def __init__(self, container_id: ContainerID, step: str, cause: str) -> None:
        from mesilla.v1.mesos import Reason  # here, not above: see the import above

        super().__init__(
            f"Failed to launch container {container_id} during {step}: {cause}",
            container_id=container_id,
        )
        self.reason = Reason.REASON_CONTAINER_LAUNCH_FAILED
        self.step = step
        self.cause = cause


class InvalidContainer(ContainerLaunchError):
    status = 400


class ImageUnavailable(ContainerLaunchError):
    status = 503
