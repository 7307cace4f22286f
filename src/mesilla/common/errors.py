"""Errors that cross the HTTP boundary, each carrying the status it maps to.

    HttpError
    ├── BadRequest          400  malformed or invalid input; the message names the field
    │   └── Invalid              input that breaks a rule; `field` names it
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


class Invalid(BadRequest):
    """Input that breaks a rule (a Mesos validation); `field` names the offending field
    (``framework_info.roles``), None when the message alone can say it."""

    def __init__(self, reason: str = "", *, field: str | None = None) -> None:
        super().__init__(reason)
        self.field = field
