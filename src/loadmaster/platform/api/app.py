"""The FastAPI application: routers, error handlers, and the OpenAPI schema (served at /openapi.json, /docs)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from loadmaster.platform.api import cluster, code, docs, errors, health, jobs, logs, outputs, queue, tenants, usage
from loadmaster.platform.api.context import ApiContext
from loadmaster.platform.api.shortcut import Shortcut
from loadmaster.platform.manifest import JobManifest

DESCRIPTION = """The loadmaster platform: tenants submit training jobs, the control loop schedules them.

Authenticate with `Authorization: Bearer TOKEN`: a tenant's token (from `loadmaster tenant create`) sees
and acts on that tenant's jobs only; the admin token manages tenants and sees every job. Every error is a
JSON body `{"error": ..., "problems": [{"field": ..., "message": ...}]}` naming the input at fault.
"""


def _openapi(app: FastAPI) -> Any:
    """FastAPI's schema plus the JobManifest (the submit route reads its body itself, JSON or YAML)."""

    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        manifest = JobManifest.model_json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(manifest.pop("$defs", {}))
        components["JobManifest"] = manifest
        app.openapi_schema = schema
        return schema

    return build


def _build(version: str) -> FastAPI:
    # FastAPI's own /docs page loads Swagger UI from a CDN: docs.install serves it from a package instead.
    app = FastAPI(title="loadmaster", version=version or health._version(), description=DESCRIPTION,
                  docs_url=None, redoc_url=None, openapi_url="/openapi.json")
    # The hot route beside FastAPI's dispatch, inside the backstop (errors.install adds it after: outermost).
    app.add_middleware(Shortcut, method="POST", path=jobs.router.prefix, answer=jobs.submit_directly)
    errors.install(app)
    docs.install(app)
    routes = []
    for module in (health, jobs, code, logs, outputs, queue, cluster, tenants, usage):
        app.include_router(module.router)
        routes += module.router.routes
    app.state.route_methods = errors.route_methods(routes)
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    return app


def create_app(ctx: ApiContext, *, version: str = "") -> FastAPI:
    app = _build(version)
    app.state.ctx = ctx
    return app


def openapi_document() -> dict[str, Any]:
    """The OpenAPI schema, without a server (for tools and tests)."""
    schema: dict[str, Any] = _build("").openapi()
    return schema
