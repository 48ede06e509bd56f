"""/health: is the server up (no token needed; for load balancers and `loadmaster` itself)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter

from loadmaster.platform.api.auth import Ctx
from loadmaster.platform.api.models import Health

router = APIRouter(tags=["health"])


def _version() -> str:
    try:
        return version("loadmaster")
    except PackageNotFoundError:
        return "unknown"


@router.get("/health", response_model=Health, summary="Liveness: the API answers and whether a scheduler runs")
async def health(ctx: Ctx) -> Health:
    return Health(status="ok", version=_version(), scheduler=ctx.loop is not None)
