"""The web dashboard: static files (plain HTML, JS and CSS, no build step) that talk to the API with the
user's token. The API app mounts them with `mount_dashboard(app)`; nothing here knows the store or the loop.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC_DIR = Path(__file__).parent / "static"
DASHBOARD_PATH = "/ui"

# The page may talk only to the server that served it: no CDN, no third-party request, no inline script
# (data from the API is put into the page as text, never as HTML, and this makes a slip fail loudly).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


class _DashboardFiles(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        # Revalidate on every load: an upgraded server must not run yesterday's app.js against its new API.
        response.headers["Cache-Control"] = "no-cache"
        return response


def mount_dashboard(app: FastAPI, path: str = DASHBOARD_PATH) -> None:
    """Serve the dashboard at `path` (/ui) and send a browser that opens the server's root there."""
    app.mount(path, _DashboardFiles(directory=STATIC_DIR, html=True), name="dashboard")

    async def to_dashboard() -> RedirectResponse:
        return RedirectResponse(url=path + "/", status_code=307)

    # The root belongs to the dashboard only if the API did not claim it.
    if not any(getattr(route, "path", None) == "/" for route in app.router.routes):
        app.add_api_route("/", to_dashboard, methods=["GET"], include_in_schema=False)
