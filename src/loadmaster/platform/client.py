"""A client of the platform's HTTP API (httpx): what the CLI uses, and a small SDK.

Answers are the API's JSON (dicts). Every failure is a ClientError whose message is one line naming the fix:
a server that is not there, a missing or unknown token, or the API's own error (which names the field).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from loadmaster.platform.code import Package

DEFAULT_URL = "http://127.0.0.1:8080"
URL_ENV = "LOADMASTER_URL"
TOKEN_ENV = "LOADMASTER_TOKEN"
ADMIN_TOKEN_ENV = "LOADMASTER_ADMIN_TOKEN"
API = "/api/v1"
QUEUE_PAGE_MAX = 10_000  # the most entries one GET /api/v1/queue answers (api/queue.py: limit)


class ClientError(Exception):
    def __init__(self, message: str, status: int | None = None, problems: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.problems = problems or []


def _error_of(response: httpx.Response) -> ClientError:
    try:
        body = response.json()
        message, problems = str(body.get("error") or response.reason_phrase), list(body.get("problems") or [])
    except (ValueError, AttributeError):
        message, problems = f"HTTP {response.status_code} {response.reason_phrase}", []
    if response.status_code == 401:
        message += f" (set {TOKEN_ENV}, or {ADMIN_TOKEN_ENV} for the admin's verbs)"
    return ClientError(message, response.status_code, problems)


class Client:
    def __init__(self, url: str | None = None, token: str | None = None, *, timeout_s: float = 30.0) -> None:
        self.url = (url or DEFAULT_URL).rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # A plain-http server never needs TLS (and redirects are not followed): the CA bundle httpx would load
        # for its default TLS context costs ~50 ms of a `loadmaster queue` of ~250.
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s,
                                  verify=not self.url.startswith("http://"))

    @classmethod
    def from_env(cls, *, admin: bool = False, env: Mapping[str, str] | None = None) -> Client:
        """LOADMASTER_URL and LOADMASTER_TOKEN (admin: LOADMASTER_ADMIN_TOKEN first)."""
        env = os.environ if env is None else env
        token = (env.get(ADMIN_TOKEN_ENV) if admin else None) or env.get(TOKEN_ENV)
        if not token:
            need = f"{ADMIN_TOKEN_ENV} (or {TOKEN_ENV}) to the admin token" if admin else \
                f"{TOKEN_ENV} to your tenant's token (from `loadmaster tenant create`)"
            raise ClientError(f"no token: set {need}")
        return cls(env.get(URL_ENV) or DEFAULT_URL, token)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- plumbing --------------------------------------------------------------------------------------
    def _unreachable(self, err: Exception) -> ClientError:
        return ClientError(f"cannot reach the loadmaster server at {self.url} ({err.__class__.__name__}): start it "
                           f"with `loadmaster server`, or set {URL_ENV} to its address")

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as err:
            raise self._unreachable(err) from None
        if response.status_code >= 400:
            raise _error_of(response)
        return response.json()

    # -- jobs ------------------------------------------------------------------------------------------
    def submit(self, manifest: str | Mapping[str, Any], *, yaml: bool = True, tenant: str | None = None) -> Any:
        """Submit a manifest: YAML (or JSON) text, or a mapping."""
        params = {"tenant": tenant} if tenant else None
        if isinstance(manifest, str):
            kind = "application/yaml" if yaml else "application/json"
            return self.request("POST", f"{API}/jobs", content=manifest.encode(), headers={"content-type": kind},
                                params=params)
        return self.request("POST", f"{API}/jobs", json=dict(manifest), params=params)

    def upload_code(self, directory: Path, max_bytes: int) -> Package:
        """Pack a working directory (platform/code.py) and upload it unless the server has it; the package
        (its digest is the manifest's `code`). CodeError when the directory cannot be packed (too large: the
        message says how to change the limit)."""
        from loadmaster.platform.code import pack

        package = pack(directory, max_bytes)
        try:
            self.request("GET", f"{API}/code/{package.digest}")
            return package
        except ClientError as err:
            if err.status != 404:
                raise
        self.request("POST", f"{API}/code", content=package.archive,
                     headers={"content-type": "application/octet-stream"}, timeout=300.0)
        return package

    def usage(self, *, since: float | None = None, until: float | None = None, by: str = "day",
              tenant: str | None = None) -> Any:
        """GPU-hours used, failed and preempted (GET /api/v1/usage)."""
        params = {k: v for k, v in (("since", since), ("until", until), ("by", by), ("tenant", tenant))
                  if v is not None}
        return self.request("GET", f"{API}/usage", params=params)

    def jobs_page(self, *, status: list[str] | None = None, name: str | None = None,
                  name_contains: str | None = None, id_prefix: str | None = None, tenant: str | None = None,
                  limit: int = 100, before: str | None = None, array: str | None = None) -> Any:
        """One page of jobs, newest first: {"jobs": [...], "next_cursor": ...} (pass it as `before`)."""
        params: dict[str, Any] = {"limit": limit}
        for key, value in (("status", status), ("name", name), ("name_contains", name_contains),
                           ("id_prefix", id_prefix), ("tenant", tenant), ("before", before), ("array", array)):
            if value:
                params[key] = value
        return self.request("GET", f"{API}/jobs", params=params)

    def jobs(self, **filters: Any) -> list[Any]:
        """The first page of jobs (jobs_page's filters), as a list."""
        return list(self.jobs_page(**filters)["jobs"])

    def job(self, job_id: str) -> Any:
        return self.request("GET", f"{API}/jobs/{job_id}")

    def action(self, job_id: str, verb: str) -> Any:
        """cancel, halt or resume."""
        return self.request("POST", f"{API}/jobs/{job_id}/{verb}")

    def scale(self, job_id: str, learners: int) -> Any:
        return self.request("POST", f"{API}/jobs/{job_id}/scale", json={"learners": learners})

    def logs(self, job_id: str, *, attempt: int | None = None, rank: int | None = None,
             tail: int | None = None) -> Any:
        params = {k: v for k, v in (("attempt", attempt), ("rank", rank), ("tail", tail)) if v is not None}
        return self.request("GET", f"{API}/jobs/{job_id}/logs", params=params)

    def follow(self, job_id: str, *, attempt: int | None = None, rank: int | None = None, tail: int | None = None,
               after: int | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """The log stream's events (status, attempt, log, end) until the attempt ends."""
        params = {k: v for k, v in (("attempt", attempt), ("rank", rank), ("tail", tail), ("after", after))
                  if v is not None}
        try:
            with self._http.stream("GET", f"{API}/jobs/{job_id}/logs/stream", params=params,
                                   timeout=httpx.Timeout(30.0, read=None)) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _error_of(response)
                kind = "message"
                for line in response.iter_lines():
                    if line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:"):
                        yield kind, json.loads(line[5:])
                    elif not line:
                        kind = "message"
        except httpx.TransportError as err:
            raise self._unreachable(err) from None

    # -- the rest --------------------------------------------------------------------------------------
    def queue_page(self, tenant: str | None = None, *, limit: int = 1000, offset: int = 0) -> Any:
        """One page of the queue: {"entries", "total", "offset", "limit", "next_offset"}."""
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if tenant:
            params["tenant"] = tenant
        return self.request("GET", f"{API}/queue", params=params)

    def queue(self, tenant: str | None = None, *, limit: int | None = None) -> list[Any]:
        """The queue's entries: the first `limit`, or every one (page after page)."""
        entries: list[Any] = []
        offset: int | None = 0
        while offset is not None and (limit is None or len(entries) < limit):
            # The API's largest page: a queue of up to 10,000 in one request (each costs the server a scan of
            # the queue), and listed from one round of the control loop rather than two.
            size = QUEUE_PAGE_MAX if limit is None else min(QUEUE_PAGE_MAX, limit - len(entries))
            page = self.queue_page(tenant, limit=size, offset=offset)
            entries += page["entries"]
            offset = page.get("next_offset")
        return entries

    def cluster(self) -> Any:
        return self.request("GET", f"{API}/cluster")

    def drain(self, node: str, *, undo: bool = False) -> Any:
        return self.request("POST", f"{API}/cluster/nodes/{node}/{'undrain' if undo else 'drain'}")

    def tenants(self) -> list[Any]:
        return list(self.request("GET", f"{API}/tenants")["tenants"])

    def create_tenant(self, name: str, gpus: int, borrow: int | None = None, *, user: str = "default",
                      os_user: str | None = None) -> Any:
        return self.request("POST", f"{API}/tenants", json={"name": name, "gpus": gpus, "borrow": borrow,
                                                            "user": user, "os_user": os_user})

    def delete_tenant(self, name: str) -> Any:
        return self.request("DELETE", f"{API}/tenants/{name}")

    def set_roots(self, name: str, roots: list[dict[str, Any]]) -> Any:
        return self.request("PATCH", f"{API}/tenants/{name}", json={"roots": roots})

    def users(self, name: str) -> Any:
        return self.request("GET", f"{API}/tenants/{name}/tokens")

    def rotate_token(self, name: str, user: str, expires_in_s: float | None = None) -> Any:
        return self.request("POST", f"{API}/tenants/{name}/tokens/{user}/rotate",
                            json={"user": user, "expires_in_s": expires_in_s})

    def revoke_token(self, name: str, user: str) -> Any:
        return self.request("DELETE", f"{API}/tenants/{name}/tokens/{user}")

    def audit(self, tenant: str | None = None, limit: int = 100) -> Any:
        params: dict[str, Any] = {"limit": limit}
        if tenant:
            params["tenant"] = tenant
        return self.request("GET", f"{API}/audit", params=params)["entries"]

    def set_quota(self, name: str, *, gpus: int | None = None, borrow: int | None = None,
                  unlimited_borrowing: bool = False) -> Any:
        body: dict[str, Any] = {}
        if gpus is not None:
            body["gpus"] = gpus
        if unlimited_borrowing:
            body["borrow"] = None
        elif borrow is not None:
            body["borrow"] = borrow
        return self.request("PATCH", f"{API}/tenants/{name}", json=body)

    def new_token(self, name: str, user: str = "default", expires_in_s: float | None = None) -> Any:
        return self.request("POST", f"{API}/tenants/{name}/tokens", json={"user": user, "expires_in_s": expires_in_s})

    def whoami(self) -> Any:
        return self.request("GET", f"{API}/whoami")

    def health(self) -> Any:
        return self.request("GET", "/health")
