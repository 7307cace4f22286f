"""Errors that cross the HTTP boundary, each carrying the status it maps to.

    HttpError
    ├── BadRequest          400  malformed or invalid input; the message names the field
    ├── Unauthorized        401
    ├── Forbidden           403  e.g. a wrong Mesos-Stream-Id
    ├── NotFound            404  unknown container, file, ...
    ├── Conflict            409
    ├── PayloadTooLarge     413
    ├── UnsupportedMediaType 415
    ├── NotAcceptable       406
    ├── TemporaryRedirect   307  not the leading master
    └── ServiceUnavailable  503  no leader, still recovering

Handlers raise these; `mesilla.common.http` turns them into plain-text
responses in one place, so bad input is always a 4xx with a reason.
"""

from __future__ import annotations

from mesilla.v1.mesos import ContainerID, Reason


class HttpError(Exception):
    status: int = 500

    def __init__(self, reason: str = "", *, headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.headers = headers or {}


class BadRequest(HttpError):
    status = 400


class Unauthorized(HttpError):
    status = 401


class Forbidden(HttpError):
    status = 403


class NotFound(HttpError):
    status = 404


class NotAcceptable(HttpError):
    status = 406


class Conflict(HttpError):
    status = 409


class PayloadTooLarge(HttpError):
    status = 413


class UnsupportedMediaType(HttpError):
    status = 415


class TemporaryRedirect(HttpError):
    status = 307


class ServiceUnavailable(HttpError):
    status = 503


# --- container errors ------------------------------------------------------------------
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


class ContainerError(Exception):
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

    reason = Reason.REASON_CONTAINER_LAUNCH_FAILED

    def __init__(self, container_id: ContainerID, step: str, cause: str) -> None:
        super().__init__(
            f"Failed to launch container {container_id} during {step}: {cause}",
            container_id=container_id,
        )
        self.step = step
        self.cause = cause


class InvalidContainer(ContainerLaunchError):
    status = 400


class ImageUnavailable(ContainerLaunchError):
    status = 503
