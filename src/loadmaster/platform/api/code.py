"""/api/v1/code: code packages (platform/code.py). `job submit --working-dir` asks whether the server has
the package (GET, by digest) and uploads it only when not (POST, the gzipped tar as the body); the
manifest then names it (`code: sha256:HEX`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from loadmaster.platform import code
from loadmaster.platform.api.auth import Ctx, Who
from loadmaster.platform.api.errors import ApiError, field_error, responses
from loadmaster.platform.api.submission import bounded_body

router = APIRouter(prefix="/api/v1/code", tags=["code"])

Digest = Annotated[str, Path(pattern=r"^sha256:[0-9a-f]{64}$", description="sha256:HEX, as the upload returned.")]

_ARCHIVE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The working directory as a gzipped tar (what `loadmaster job submit --working-dir` "
                       "packs).",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}
# tar headers and gzip framing on top of the files themselves: the body may exceed the files' bytes a little
_FRAMING_BYTES = 1 << 20


class CodePackage(BaseModel):
    digest: str  # sha256:HEX: put it in the manifest as `code`
    archive_bytes: int
    files: int | None = None  # what the upload held (the upload's answer only)
    bytes: int | None = None  # its files' sizes, added up


async def _body(request: Request, max_bytes: int) -> bytes:
    too_large = ApiError(413, f"the package is larger than the server's limit of {max_bytes / (1 << 20):.1f} MiB: "
                              "leave out what the job does not need (.loadmasterignore), or ask the operator to "
                              "raise `loadmaster server --max-upload-mb`", [("body", "too large")])
    return await bounded_body(request, max_bytes + _FRAMING_BYTES, too_large)


@router.post("", status_code=201, response_model=CodePackage, openapi_extra=_ARCHIVE_BODY,
             responses=responses(400, 401, 413, 503), summary="Upload a code package (a gzipped tar)")
async def upload(request: Request, ctx: Ctx, _who: Who) -> CodePackage:
    archive = await _body(request, ctx.max_code_bytes)
    if not archive:
        raise field_error(400, "body", "the body is empty: send the working directory as a gzipped tar")

    def keep() -> CodePackage:
        try:
            files, size = code.check_archive(archive, ctx.max_code_bytes)
        except code.CodeError as err:
            raise field_error(400, "body", str(err)) from None
        return CodePackage(digest=code.store(ctx.dirs.root, archive), archive_bytes=len(archive), files=files,
                           bytes=size)

    return await run_in_threadpool(keep)


@router.get("/{digest}", response_model=CodePackage, responses=responses(401, 404, 422),
            summary="Whether the server has a code package (so that it is not uploaded twice)")
def has(digest: Digest, ctx: Ctx, _who: Who) -> CodePackage:
    path = code.archive_path(ctx.dirs.root, digest)
    if not path.is_file():
        raise field_error(404, "digest", f"no code package {digest} on this server: upload it (POST /api/v1/code)")
    return CodePackage(digest=digest, archive_bytes=path.stat().st_size)
