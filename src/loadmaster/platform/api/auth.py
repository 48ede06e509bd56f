"""Bearer tokens: a tenant's token acts for that tenant only; the admin token manages tenants and sees all."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from loadmaster.platform.api.context import ApiContext
from loadmaster.platform.api.errors import ApiError
from loadmaster.platform.store.tenants import Principal

bearer = HTTPBearer(auto_error=False, description="A tenant's token (from `loadmaster tenant create`) or the "
                                                  "admin token.")

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


async def context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


async def principal(
    ctx: Annotated[ApiContext, Depends(context)],
    creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    if creds is None or not creds.credentials:
        raise ApiError(401, "no token: send 'Authorization: Bearer TOKEN' (the CLI reads LOADMASTER_TOKEN)",
                       [("Authorization", "missing")], headers=_CHALLENGE)
    found = await ctx.auth.shared(creds.credentials)
    if found is None:
        raise ApiError(401, "the server does not know this token: use a token printed by `loadmaster tenant "
                            "create` (or the admin token)", [("Authorization", "unknown token")], headers=_CHALLENGE)
    return found


async def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if not who.is_admin:
        raise ApiError(403, "only the admin token may do this: use LOADMASTER_ADMIN_TOKEN",
                       [("Authorization", "a tenant token; this needs the admin token")])
    return who


Ctx = Annotated[ApiContext, Depends(context)]
# The token itself, for a long response that looks it up again as it goes (a log stream: api/logs.py).
Creds = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
Who = Annotated[Principal, Depends(principal)]
Admin = Annotated[Principal, Depends(admin)]
