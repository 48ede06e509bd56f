"""One hot route answered beside FastAPI's dispatch: a submission without a query string.

Routing, dependency resolution, the exception middleware and response-model validation cost about a
third of a submission's CPU on the server, more than the route's own work. The shortcut calls the same
functions FastAPI would (the route's dependencies, then the route itself) and serialises its answer the
same way; the route stays registered, so the schema, a request with a query string and every other
request are FastAPI's as before. An exception is answered by the handler the app installed for its class;
one with no handler goes on outward to the backstop, as it would from the route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Answer = Callable[[Request], Awaitable[Response]]


class Shortcut:
    """ASGI middleware: `method path` without a query string goes to `answer`, everything else to the app."""

    def __init__(self, app: ASGIApp, method: str, path: str, answer: Answer) -> None:
        self.app = app
        self.method = method
        self.path = path
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["path"] != self.path or scope["method"] != self.method
                or scope.get("query_string")):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await self.answer(request)
        except Exception as exc:
            handler = _handler(scope["app"].exception_handlers, exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await response(scope, receive, send)


def _handler(handlers: dict[object, Callable[..., Awaitable[Response]]],
             exc: Exception) -> Callable[..., Awaitable[Response]] | None:
    """The handler for the nearest class of `exc` (Starlette's ExceptionMiddleware looks them up so)."""
    for cls in type(exc).__mro__:
        if cls in handlers:
            return handlers[cls]
    return None
