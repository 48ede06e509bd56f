"""/docs: Swagger UI over /openapi.json, with its JavaScript and CSS served by this server from a Python package
(fastapi-offline's copy of Swagger UI), never from a CDN: the docs work on a machine without internet access,
and opening them tells no third party that the server exists."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/assets"
ASSET_NAMES = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png")


def assets_dir() -> Path:
    """The folder of Swagger UI's files in the installed package."""
    return Path(str(files("fastapi_offline") / "static"))


def install(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    """Serve the docs page at /docs and Swagger UI's files at /docs/assets/."""
    title = f"{app.title} API"

    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=openapi_url, title=title,
                                   swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS_PATH}/favicon.png")

    app.add_api_route(DOCS_PATH, docs, methods=["GET"], include_in_schema=False)
    app.mount(ASSETS_PATH, StaticFiles(directory=assets_dir()), name="docs-assets")
