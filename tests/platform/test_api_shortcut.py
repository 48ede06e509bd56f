"""POST /api/v1/jobs answered beside FastAPI's dispatch (api/shortcut.py): the same answers, errors and
headers as the route itself gives (a query string sends a request down FastAPI's path)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from loadmaster.platform.api.shortcut import Shortcut
from tests.platform import api_fixtures
from tests.platform.api_fixtures import Api

sqlite_api = api_fixtures.sqlite_api

MANIFEST = {"name": "bench", "command": ["python", "train.py"], "resources": {"gpus": 1, "cpus": 0.5,
                                                                               "memory_gb": 0.5}}
VARYING = {"id", "submitted_at", "queued_since"}


class Refused(Exception):
    pass


def _app() -> Starlette:
    async def route(_request: Request) -> Response:
        return PlainTextResponse("the app")

    async def answer(request: Request) -> Response:
        body = await request.body()
        if body == b"refuse":
            raise Refused()
        if body == b"crash":
            raise ZeroDivisionError()
        return PlainTextResponse("the shortcut", status_code=201)

    async def refused(_request: Request, _exc: Exception) -> Response:
        return JSONResponse({"error": "refused"}, status_code=422)

    app = Starlette(routes=[Route("/jobs", route, methods=["GET", "POST"])], exception_handlers={Refused: refused})
    app.add_middleware(Shortcut, method="POST", path="/jobs", answer=answer)
    return app


def test_the_shortcut_takes_only_its_own_requests_and_answers_errors_by_the_apps_handlers() -> None:
    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=_app()), base_url="http://t") as c:
            assert (await c.post("/jobs", content=b"x")).text == "the shortcut"
            assert (await c.post("/jobs?x=1", content=b"x")).text == "the app"  # a query string: the app's route
            assert (await c.get("/jobs")).text == "the app"
            refused = await c.post("/jobs", content=b"refuse")  # handled: the app's own handler answers
            assert refused.status_code == 422 and refused.json() == {"error": "refused"}
            with pytest.raises(ZeroDivisionError):  # unhandled: on outward, as from a route
                await c.post("/jobs", content=b"crash")

    asyncio.run(run())


def _both(c: httpx.Client, tenant: str, **kw: object) -> tuple[httpx.Response, httpx.Response]:
    """The same request down the shortcut and down FastAPI's route (?tenant=, its own tenant)."""
    return c.post("/api/v1/jobs", **kw), c.post("/api/v1/jobs", params={"tenant": tenant}, **kw)  # type: ignore[arg-type]


def test_a_submission_is_answered_alike_down_both_paths(sqlite_api: Api) -> None:
    token = sqlite_api.tenant("vision")
    with sqlite_api.client(token) as c:
        short, routed = _both(c, "vision", json=MANIFEST)
        assert short.status_code == routed.status_code == 201
        assert short.headers["content-type"] == routed.headers["content-type"]
        a, b = short.json(), routed.json()
        assert list(a) == list(b) and {k: v for k, v in a.items() if k not in VARYING} == {
            k: v for k, v in b.items() if k not in VARYING}
        for r in (short, routed):  # both committed
            assert c.get(f"/api/v1/jobs/{r.json()['id']}").json()["status"] == "QUEUED"
        cases = [dict(json={**MANIFEST, "gpus_typo": 1}),  # 422 naming the field
                 dict(json={**MANIFEST, "resources": {"gpus": 64}}),  # admission: never fits
                 dict(content=b"{not json", headers={"content-type": "application/json"}),  # 400
                 dict(content=b"name: x", headers={"content-type": "text/plain"})]  # 415
        for kw in cases:
            short, routed = _both(c, "vision", **kw)
            assert (short.status_code, short.json()) == (routed.status_code, routed.json())
    with sqlite_api.client() as c:  # no token: 401 with its challenge header, down both paths
        short, routed = _both(c, "vision", json=MANIFEST)
        assert (short.status_code, short.json()) == (routed.status_code, routed.json()) == (401, short.json())
        assert short.headers["www-authenticate"] == routed.headers["www-authenticate"] == "Bearer"
    with sqlite_api.admin() as c:  # the admin names the tenant: without it, 422 on the field
        short = c.post("/api/v1/jobs", json=MANIFEST)
        assert short.status_code == 422 and short.json()["problems"][0]["field"] == "tenant"
