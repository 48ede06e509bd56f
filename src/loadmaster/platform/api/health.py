"""/health: is the server up and is its control loop going (no token needed: for load balancers, monitors
and `loadmaster` itself); /metrics: Prometheus metrics of the control loop (the admin token).

/health answers 503 when no control-loop round completed for the loop's `stuck_after_s` (30 s by default:
a round takes milliseconds), or its thread died, or the store does not answer; the body says which.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from loadmaster.platform.api.auth import Admin, Ctx
from loadmaster.platform.api.context import ApiContext
from loadmaster.platform.api.errors import RETRY_AFTER_S, responses
from loadmaster.platform.api.models import Health

router = APIRouter(tags=["health"])


def _version() -> str:
    try:
        return version("loadmaster")
    except PackageNotFoundError:
        return "unknown"


def _store_answers(ctx: ApiContext) -> bool:
    try:
        with ctx.store.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError:
        return False
    return True


@router.get("/health", response_model=Health, summary="Liveness: the API answers, the loop goes, the store answers",
            responses={503: {"model": Health, "description": "The control loop is stuck or the store does not "
                                                             "answer."}})
async def health(ctx: Ctx, response: Response) -> Health:
    healthy, age = ctx.loop.health() if ctx.loop is not None else (True, None)
    out = Health(status="ok", version=_version(), scheduler=ctx.loop is not None,
                 last_round_age_s=None if age is None else round(age, 3))
    if ctx.isolation is not None:
        out.sandbox = ctx.isolation.sandbox is not None
        out.tenant_users = ctx.isolation.switch_users
        out.isolation = ctx.isolation.describe()
    if not healthy:
        out.status = "stuck"
        out.detail = "no control-loop round completed recently: the server's log says why"
    elif not await run_in_threadpool(_store_answers, ctx):
        out.status = "store_unavailable"
        out.detail = "the store does not answer"
    if out.status != "ok":
        response.status_code = 503
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return out


@router.get("/metrics", responses={**responses(401, 403), 200: {
    "description": "Prometheus text exposition format.", "content": {"text/plain": {"schema": {"type": "string"}}}}},
    response_class=Response, summary="Prometheus metrics of the control loop (admin token)")
def metrics(ctx: Ctx, who: Admin) -> Response:
    body = generate_latest(ctx.metrics) if ctx.metrics is not None else b""
    return Response(body, media_type=CONTENT_TYPE_LATEST)
