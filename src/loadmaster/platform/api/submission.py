"""Reading a submitted manifest from a request body (JSON, or YAML by Content-Type) into a JobManifest.

Kept apart from the route so the hot path is plain code: decode, validate, admit, one INSERT. Limits that
keep one request from costing the server much (or a job from failing at every launch) are checked before
the expensive steps: the body's size (413), its nesting (400, before the YAML parser, which is pure Python
and slow on thousands of nested brackets), and the command line and environment a process can be given
(422: a command over what the kernel takes would be accepted and then fail at every launch).
"""

from __future__ import annotations

import json

from fastapi import Request

from loadmaster.platform.api.errors import ApiError, field_error
from loadmaster.platform.manifest import JobManifest, ManifestError, load_manifest_text, parse_manifest

JSON_TYPES = frozenset({"application/json", ""})
MAX_DEPTH = 32  # a manifest is a mapping of a few levels
MAX_ARG_BYTES = 128 * 1024 - 1  # Linux's MAX_ARG_STRLEN, its terminating NUL left out
MAX_COMMAND_BYTES = 256 * 1024  # the whole command line; the environment has the same budget
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _manifest_error(err: ManifestError) -> ApiError:
    # A problem with no field is about the body as a whole (not YAML, not a mapping): the request is malformed.
    if all(not loc for loc, _ in err.problems):
        return ApiError(400, f"body: {err}", [("body", msg) for _, msg in err.problems])
    first_loc, first_msg = err.problems[0]
    more = f" (and {len(err.problems) - 1} more)" if len(err.problems) > 1 else ""
    return ApiError(422, f"invalid manifest: {first_loc}: {first_msg}{more}", list(err.problems))


def decode_manifest(body: bytes, content_type: str | None, max_bytes: int) -> JobManifest:
    if len(body) > max_bytes:
        raise ApiError(413, f"the manifest is {len(body):,} bytes; the limit is {max_bytes:,} (put data in the "
                            "`data` source, not in the manifest)", [("body", "too large")])
    kind = media_type(content_type)
    if not body.strip():
        raise field_error(400, "body", "the body is empty: send the job manifest as JSON (application/json) or "
                                       "YAML (application/yaml)")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise field_error(400, "body", "the body is not UTF-8 text") from None
    depth = nesting(text, MAX_DEPTH)
    if depth > MAX_DEPTH:
        raise field_error(400, "body", f"the manifest is nested {depth} levels deep; a manifest is a mapping of a "
                                       f"few levels (at most {MAX_DEPTH})")
    try:
        manifest = _parse(text, kind)
    except ManifestError as err:
        raise _manifest_error(err) from None
    except RecursionError:  # the decoders recurse per level: thousands of nested brackets exhaust the stack
        raise field_error(400, "body", "the manifest is nested too deeply to read; a manifest is a mapping of a "
                                       "few levels") from None
    except ValueError as err:  # e.g. an integer of more digits than Python converts (sys.int_max_str_digits)
        raise field_error(400, "body", f"a value cannot be read: {err}") from None
    # In JSON only an escape (\u0000, \ud800) can produce such a string: skip the walk over the manifest for
    # the usual JSON body without one (the submission path is hot). YAML has more ways (!!binary): always.
    if kind not in JSON_TYPES or "\\" in text or "\x00" in text:
        unusable = _unusable_text(manifest.model_dump(exclude_none=True), "")
        if unusable is not None:
            raise field_error(422, *unusable)
    _check_process_limits(manifest)
    return manifest


def nesting(text: str, limit: int) -> int:
    """How deep the text's brackets nest, outside quoted strings, or its block style by indentation and
    dashes ("- - - x" opens three sequences), whichever is deeper: no parsing (an estimate of the parse's
    depth; a manifest uses a few levels). Exact whenever it passes `limit`; at most `limit` otherwise."""
    # The bracket walk goes a character at a time; brackets cannot nest deeper than there are of them, so a
    # text with no more than `limit` (the usual manifest) skips it: past the limit, the block style decides.
    brackets = bracket_depth(text) if text.count("[") + text.count("{") > limit else 0
    return max(brackets, block_depth(text))


def bracket_depth(text: str) -> int:
    """How deep the text's brackets nest, outside quoted strings."""
    deepest = depth = 0
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def block_depth(text: str) -> int:
    """How deep the block style nests, by indentation and dashes ("- - - x" opens three sequences)."""
    return max((len(line) - len(line.lstrip("- ")) for line in text.splitlines()), default=0) // 2


def _check_process_limits(manifest: JobManifest) -> None:
    argv = manifest.argv
    longest = max((len(a.encode()) for a in argv), default=0)
    if longest > MAX_ARG_BYTES:
        raise field_error(422, "command", f"one argument is {longest:,} bytes; a process takes at most "
                                          f"{MAX_ARG_BYTES:,} per argument: pass large inputs in a file (the "
                                          "job's data source), not on the command line")
    total = sum(len(a.encode()) + 1 for a in argv)
    if total > MAX_COMMAND_BYTES:
        raise field_error(422, "command", f"the command line is {total:,} bytes; the limit is {MAX_COMMAND_BYTES:,}: "
                                          "pass large inputs in a file (the job's data source)")
    env = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in manifest.env.items())
    longest = max((len(k.encode()) + len(v.encode()) + 1 for k, v in manifest.env.items()), default=0)
    if env > MAX_COMMAND_BYTES or longest > MAX_ARG_BYTES:
        raise field_error(422, "env", f"the environment is {env:,} bytes (its largest variable {longest:,}); the "
                                      f"limits are {MAX_COMMAND_BYTES:,} in all and {MAX_ARG_BYTES:,} per variable")


def _parse(text: str, kind: str) -> JobManifest:
    if kind in JSON_TYPES:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise field_error(400, "body", f"not valid JSON at line {err.lineno}, column {err.colno}: "
                                           f"{err.msg}; send YAML with Content-Type: application/yaml") from None
        return parse_manifest(data)
    if kind in YAML_TYPES:
        return load_manifest_text(text)
    raise ApiError(415, f"Content-Type {kind!r} is not supported: send application/json or application/yaml",
                   [("Content-Type", "use application/json or application/yaml")])


def _unusable_text(value: object, path: str) -> tuple[str, str] | None:
    """The first string of the manifest that no process can be given, as (field, message): a NUL character
    (argv, environment and paths cannot hold one) or an unpaired surrogate from a JSON escape like \\ud800
    (not encodable as UTF-8: accepted, it would fail at launch and make the job unreadable to every answer)."""
    if isinstance(value, str):
        if "\x00" in value:
            return path, "contains a NUL character, which no command line, environment variable or path can hold"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path, ("contains an unpaired surrogate (a \\ud800-\\udfff escape without its pair), which is "
                          "not text: send the character itself")
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _unusable_text(key, path) or _unusable_text(item, f"{path}.{key}" if path else str(key))
            if problem is not None:
                return problem
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            problem = _unusable_text(item, f"{path}.{index}")
            if problem is not None:
                return problem
    return None


async def bounded_body(request: Request, limit: int, too_large: ApiError) -> bytes:
    """The body, refused with `too_large` as soon as it passes `limit` bytes: a huge upload is never held in
    memory (a Content-Length over the limit is refused before anything is read)."""
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)
