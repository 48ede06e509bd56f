"""Every error the API gives is a JSON ErrorBody with a 4xx status that names the field at fault and the fix.

Handlers are installed for the API's own ApiError, FastAPI's request validation, Starlette's HTTP errors
(unknown route, wrong method), the store's errors (a busy or unreachable store is 503 with Retry-After: the
request changed nothing and may be repeated) and, as a backstop, anything else: that one answers 500
without a traceback (the traceback goes to the server's log, not to the client), and keeps the client's
connection open (Starlette's own backstop re-raises after answering, which makes uvicorn drop it).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from loadmaster.platform.store.db import transient
from loadmaster.platform.store.tenants import NoSuchTenant, TenantError, TenantExists

RETRY_AFTER_S = 1
STORE_BUSY = "the store is busy or unreachable; nothing was changed: retry in a moment"

log = logging.getLogger("loadmaster.api")


class Problem(BaseModel):
    field: str  # dotted path of the input at fault ("" for the request as a whole)
    message: str  # what is wrong and how to fix it


class ErrorBody(BaseModel):
    error: str  # one line for a person
    problems: list[Problem] = []


class ApiError(Exception):
    def __init__(self, status: int, error: str, problems: list[tuple[str, str]] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.problems = problems or []
        self.headers = headers


def field_error(status: int, field: str, message: str) -> ApiError:
    """An error about one field: the one-line error names it too, for clients that print only that line."""
    return ApiError(status, f"{field}: {message}" if field else message, [(field, message)])


_DESCRIPTIONS = {
    400: "The request body cannot be read (not JSON or YAML).",
    401: "No token, or a token the server does not know.",
    403: "The token may not do this (tenants' verbs versus the admin's).",
    404: "No such job, tenant or node for this token.",
    409: "The job's status does not allow this now.",
    413: "The request body is too large.",
    415: "Unsupported Content-Type.",
    422: "An input is invalid; `problems` names each field and the fix.",
    503: "The store is busy or unreachable; nothing was changed: retry after Retry-After seconds.",
}


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries: the listed 4xx codes, each with the ErrorBody schema, and 503 (any route
    that reads the store may find it busy)."""
    return {code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]} for code in (*codes, 503)}


def _json(status: int, body: ErrorBody, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=body.model_dump(), headers=headers)


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    # FastAPI prefixes where the input came from; a user knows query/path/header inputs by their name.
    if parts and parts[0] in ("query", "path", "header", "cookie", "body"):
        parts = parts[1:] or [parts[0]]
    return ".".join(parts)


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    problems = [Problem(field=f, message=m) for f, m in exc.problems]
    return _json(exc.status, ErrorBody(error=exc.error, problems=problems), exc.headers)


async def _tenant_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TenantError)
    status = 404 if isinstance(exc, NoSuchTenant) else 409 if isinstance(exc, TenantExists) else 422
    return _json(status, ErrorBody(error=f"{exc.field}: {exc}", problems=[Problem(field=exc.field, message=str(exc))]))


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = []
    for e in exc.errors():
        field = _location(tuple(e.get("loc", ())))
        msg = str(e.get("msg", "invalid"))
        if e.get("type") == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling"
        elif e.get("type") == "missing":
            msg = "field required"
        elif e.get("type") == "json_invalid":
            msg = "the body is not valid JSON: send a JSON object"
        problems.append(Problem(field=field, message=msg))
    first = problems[0] if problems else Problem(field="", message="invalid request")
    error = f"{first.field}: {first.message}" if first.field else first.message
    if len(problems) > 1:
        error += f" (and {len(problems) - 1} more)"
    return _json(422, ErrorBody(error=error, problems=problems))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        error = f"no such endpoint: {request.method} {request.url.path}; the API is described at /docs"
    elif exc.status_code == 405:
        allowed = _allowed_methods(request)
        error = f"{request.method} is not allowed on {request.url.path}; it takes {', '.join(allowed)}"
        return _json(405, ErrorBody(error=error), {"Allow": ", ".join(allowed)})
    elif exc.status_code == 400:
        error = f"the request body cannot be read ({exc.detail}): send a JSON object in UTF-8"
        return _json(400, ErrorBody(error=error, problems=[Problem(field="body", message=error)]))
    else:
        error = str(exc.detail)
    return _json(exc.status_code, ErrorBody(error=error), dict(exc.headers or {}) or None)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route takes at this path (Starlette's 405 names only the first route's)."""
    path = request.url.path
    table: list[tuple[re.Pattern[str], set[str]]] = getattr(request.app.state, "route_methods", [])
    return sorted({m for pattern, methods in table if pattern.match(path) for m in methods})


def route_methods(routes: list[Any]) -> list[tuple[re.Pattern[str], set[str]]]:
    """(path pattern, methods) of the API's routes, for the Allow header of a 405."""
    return [(r.path_regex, set(r.methods)) for r in routes if getattr(r, "methods", None) and
            getattr(r, "path_regex", None) is not None]


def store_busy() -> ApiError:
    return ApiError(503, STORE_BUSY, headers={"Retry-After": str(RETRY_AFTER_S)})


async def _store_error(request: Request, exc: Exception) -> JSONResponse:
    if transient(exc):
        log.warning("store unavailable on %s %s: %s", request.method, request.url.path, exc)
        return _json(503, ErrorBody(error=STORE_BUSY), {"Retry-After": str(RETRY_AFTER_S)})
    return await _unexpected(request, exc)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _json(500, ErrorBody(error="internal error; the server's log has the details"))


class Backstop:
    """Any exception the handlers did not answer becomes a 500 JSON answer here, inside Starlette's own
    backstop, so the connection stays usable (a keep-alive client is not reset)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:  # part of an answer went out (a stream): nothing sound can follow it
                raise
            request = Request(scope)
            response = await (_store_error(request, exc) if isinstance(exc, SQLAlchemyError)
                              else _unexpected(request, exc))
            await response(scope, receive, send)


def install(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(TenantError, _tenant_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(SQLAlchemyError, _store_error)
    app.add_middleware(Backstop)
