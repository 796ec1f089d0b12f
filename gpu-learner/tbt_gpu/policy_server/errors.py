"""Errors that carry an HTTP status and become ``{error: {message, type, param, code}}`` bodies."""

from __future__ import annotations


class ApiError(Exception):
    """An error the client caused or should see, with its HTTP status."""

    status = 500
    error_type = "InternalServerError"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.status}}


class BadRequest(ApiError):
    """400: the request is malformed; ``param`` names the offending field."""

    status = 400
    error_type = "BadRequestError"


class NotFound(ApiError):
    status = 404
    error_type = "NotFoundError"


class MethodNotAllowed(ApiError):
    status = 405
    error_type = "MethodNotAllowedError"


class Unauthorized(ApiError):
    status = 401
    error_type = "AuthenticationError"


class Forbidden(ApiError):
    status = 403
    error_type = "PermissionDeniedError"


class Unavailable(ApiError):
    status = 503
    error_type = "ServiceUnavailableError"
