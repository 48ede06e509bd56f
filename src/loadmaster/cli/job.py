"""`loadmaster job submit|list|show|logs|wait|cancel|halt|resume|scale`: a tenant's jobs on a running server.

A job is named by its full id or by a unique prefix of it (`j-3f2a`, or `3f2a`): remote.resolve_job.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from typer import _click  # typer vendors click: the Context its commands parse with
from typer.core import TyperCommand

from loadmaster.cli.common import add_row, console, err_console, esc, fail, print_json
from loadmaster.cli.remote import client, duration, id_column, in_, remote, resolve_job, when
from loadmaster.platform.code import DEFAULT_MAX_MB, MAX_MB_ENV

if TYPE_CHECKING:
    from loadmaster.platform.client import Client

app = typer.Typer(help="Jobs on a running server (LOADMASTER_URL, LOADMASTER_TOKEN).", no_args_is_help=True)

JobArg = Annotated[str, typer.Argument(help="The job's id, as `job submit` printed it, or a unique prefix of it.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED"}
WAIT_TIMED_OUT = 124  # `job wait --timeout` ran out (coreutils' timeout says the same)


def _print_lines(rank: int, lines: list[str], prefix: bool) -> None:
    head = f"[rank {rank}] " if prefix else ""
    sys.stdout.write("".join(f"{head}{line}\n" for line in lines))
    sys.stdout.flush()


def _print_status(event: dict[str, Any]) -> None:
    reason = f": {esc(event['reason'])}" if event.get("reason") else ""
    err_console.print(f"[dim]{when(event['at'])}[/] [bold]{esc(event['to_status'])}[/]{reason}", highlight=False)


def follow(c: Client, job_id: str, *, attempt: int | None = None, rank: int | None = None,
           tail: int | None = None, after: int | None = None, every_attempt: bool = True) -> str:
    """Print the job's status changes (stderr) and logs (stdout) live; the job's status when it ends (or,
    with every_attempt=False, when the attempt ends)."""
    while True:
        ended: dict[str, Any] = {}
        prefix = rank is None
        for kind, data in c.follow(job_id, attempt=attempt, rank=rank, tail=tail, after=after):
            if kind == "status":
                _print_status(data)
            elif kind == "attempt":
                prefix = rank is None and len(data["ranks"]) > 1
                err_console.print(f"[dim]-- attempt {data['attempt']} (ranks {', '.join(map(str, data['ranks']))})"
                                  " --[/]", highlight=False)
            elif kind == "log":
                _print_lines(data["rank"], data["lines"], prefix)
            elif kind == "end":
                ended = data
            elif kind == "revoked":
                fail(f"the log stream of {job_id} ended: {data['error']}")
        if not ended:  # the server went away mid-stream
            fail(f"the log stream of {job_id} ended early: is the server still running?")
        status = str(ended["job_status"])
        if status in TERMINAL or not every_attempt:
            return status
        # the job lives on (a retry, a preemption, a halt): follow its next attempt
        attempt = (ended["attempt"] or 0) + 1
        after = int(ended["transitions"])
        tail = None


def _exit_for(job_id: str, status: str) -> None:
    if status == "COMPLETED":
        err_console.print(f"job {esc(job_id)} [green]COMPLETED[/]", highlight=False)
        return
    err_console.print(f"job {esc(job_id)} [red]{esc(status)}[/]", highlight=False)
    raise typer.Exit(1)


class _InlineCommand(TyperCommand):
    """Everything after `--` is the job's command, never read as options (ray job submit's convention)."""

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta[_INLINE] = args[cut + 1:]
            args = args[:cut]
        return super().parse_args(ctx, args)


_INLINE = "loadmaster.inline_command"
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def _default_name(argv: list[str]) -> str:
    """`python train.py` -> train; `./run.sh` -> run: what a person would call the job."""
    script = next((a for a in argv if a.endswith((".py", ".sh"))), argv[0] if argv else "job")
    name = _NAME_CHARS.sub("-", Path(script).stem).strip("-._")[:128]
    return name or "job"


def _read_manifest(file: str) -> tuple[str, Path]:
    """The manifest's text, and the directory its relative workdir is read against."""
    if file == "-":
        return sys.stdin.read(), Path.cwd()
    path = Path(file)
    if not path.is_file():
        fail(f"no such manifest file: {file}")
    return path.read_text(encoding="utf-8", errors="replace"), path.resolve().parent


def _env_pairs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            fail(f"--env {pair!r}: give NAME=VALUE")
        out[name] = value
    return out


@app.command("submit", cls=_InlineCommand)
@remote
def submit(
    ctx: typer.Context,
    file: Annotated[str | None, typer.Argument(help="The manifest: a YAML or JSON file, or - for standard input. "
                                                    "Optional with a command after --.")] = None,
    working_dir: Annotated[Path | None, typer.Option(
        "--working-dir", "-w", help="Upload this directory (honouring .gitignore and .loadmasterignore); each "
                                    "attempt runs in a fresh copy of it. A manifest's relative `workdir` "
                                    "does the same.")] = None,
    name: Annotated[str | None, typer.Option("--name", help="The job's name (default: the script's).")] = None,
    learners: Annotated[int | None, typer.Option("--learners", min=1, help="Learners (processes).")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", min=0, help="GPUs per learner.")] = None,
    cpus: Annotated[float | None, typer.Option("--cpus", min=0.001, help="CPUs per learner.")] = None,
    memory_gb: Annotated[float | None, typer.Option("--memory-gb", min=0.001, help="GB per learner.")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE for every learner "
                                                                      "(repeatable).")] = None,
    gpu_type: Annotated[str | None, typer.Option("--gpu-type", help="Only GPUs of this type (`loadmaster "
                                                                    "cluster` lists them).")] = None,
    array: Annotated[str | None, typer.Option("--array", help="A job per index, as Slurm: 0-9, 1,3,5, 0-20:5; "
                                                              "%N runs at most N at once (0-9%2). Each task "
                                                              "reads LOADMASTER_ARRAY_INDEX.")] = None,
    after: Annotated[list[str] | None, typer.Option("--after", help="Start only once this job has started "
                                                                    "(repeatable).")] = None,
    afterany: Annotated[list[str] | None, typer.Option("--afterany", help="Start only once this job has ended, "
                                                                          "however (repeatable).")] = None,
    afterok: Annotated[list[str] | None, typer.Option("--afterok", help="Start only once this job COMPLETED; "
                                                                        "fail if it does not (repeatable).")] = None,
    max_upload_mb: Annotated[float | None, typer.Option(
        "--max-upload-mb", min=0.001, help=f"Refuse to upload more than this (default {DEFAULT_MAX_MB:g}, or "
                                           f"{MAX_MB_ENV}).")] = None,
    follow_: Annotated[bool, typer.Option("--follow", "-f", help="Stream status and logs until the job ends; "
                                                                 "exit 1 unless it COMPLETED.")] = False,
    tenant: Annotated[str | None, typer.Option("--tenant", help="With the admin token: the tenant to submit "
                                                                "for.")] = None,
    as_json: Json = False,
) -> None:
    """Submit a job: a manifest FILE, or a command after -- (e.g. `loadmaster job submit --working-dir . --gpus 1
    -- python train.py`); options override the manifest's fields."""
    inline: list[str] = list(ctx.meta.get(_INLINE) or [])
    if file is None and not inline:
        fail("give a manifest file, or the command after -- (e.g. `loadmaster job submit -- python train.py`)")
    # Checked here first so a malformed manifest is named as such even when the server is down; the server
    # checks again (and against the cluster), so this adds no rule of its own.
    from loadmaster.platform.code import CodeError
    from loadmaster.platform.manifest import ManifestError, load_manifest_text, parse_manifest

    text, base = _read_manifest(file) if file is not None else ("", Path.cwd())
    label = file or "the command line"
    data: dict[str, Any] = {}
    if text:
        try:
            data = load_manifest_text(text).model_dump(mode="json", exclude_defaults=True)
        except ManifestError as err:
            fail(f"{file}: {err}")
    changed = bool(inline or env or after or afterany or afterok) or any(
        v is not None for v in (name, learners, gpus, cpus, memory_gb, gpu_type, array, working_dir))
    data.update({k: v for k, v in (("name", name), ("learners", learners), ("array", array)) if v is not None})
    resources = {k: v for k, v in (("gpus", gpus), ("cpus", cpus), ("memory_gb", memory_gb),
                                   ("gpu_type", gpu_type)) if v is not None}
    if resources:
        data["resources"] = {**data.get("resources", {}), **resources}
    if env:
        data["env"] = {**data.get("env", {}), **_env_pairs(env)}
    if inline:
        data["command"] = inline
    data.setdefault("name", _default_name(inline or []))
    upload = working_dir.expanduser() if working_dir is not None else None
    workdir = data.get("workdir")
    if upload is None and isinstance(workdir, str) and not data.get("code") \
            and not workdir.startswith(("/", "~")):
        upload = base / workdir  # `workdir: .` in a manifest: the directory beside it, sent with the job
    if upload is not None:
        data.pop("workdir", None)
        changed = True
    try:
        parse_manifest(data)
    except ManifestError as err:
        fail(f"{label}: {err}")
    c = client(admin=tenant is not None)
    for field, given in (("after", after), ("afterany", afterany), ("afterok", afterok)):
        if given:  # ids or unique prefixes, as everywhere
            data[field] = [*data.get(field, []), *(resolve_job(c, j) for j in given)]
    if upload is not None:
        limit = max_upload_mb if max_upload_mb is not None else float(os.environ.get(MAX_MB_ENV) or DEFAULT_MAX_MB)
        try:
            package = c.upload_code(upload, int(limit * (1 << 20)))
        except CodeError as err:
            fail(str(err))
        data["code"] = package.digest
        if package.links_out and not as_json:
            err_console.print(f"[dim]left out {len(package.links_out)} link(s) that point outside {esc(str(upload))} "
                              f"(they would not resolve on the server): {esc(', '.join(package.links_out[:5]))}[/]",
                              highlight=False, soft_wrap=True)
    if changed:
        job = c.submit(data, tenant=tenant)
    else:
        job = c.submit(text, yaml=not str(file).endswith(".json"), tenant=tenant)
    if as_json:
        print_json(job)
    else:
        console.print(f"submitted {esc(job['id'])} ({esc(job['name'])}, {job['learners']} learner(s) x "
                      f"{job['gpus_per_learner']} GPU(s)): {esc(job['status'])}", highlight=False)
        if job.get("array_tasks"):
            console.print(f"array {esc(job['id'])}: {len(job['array_tasks'])} task(s): "
                          f"{esc(' '.join(job['array_tasks']))}", highlight=False, soft_wrap=True)
    if follow_:
        _exit_for(job["id"], follow(c, job["id"], attempt=1, after=0))


@app.command("list")
@remote
def list_jobs(
    status: Annotated[list[str] | None, typer.Option("--status", help="Only these statuses (repeatable).")] = None,
    name: Annotated[str | None, typer.Option("--name", help="Only jobs with this name.")] = None,
    name_contains: Annotated[str | None, typer.Option("--name-contains", help="Only jobs whose name contains "
                                                                              "this (any case).")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Admin: one tenant's jobs.")] = None,
    array: Annotated[str | None, typer.Option("--array", help="Only the tasks of this array (its id, or a unique "
                                                              "prefix).")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 100,
    before: Annotated[str | None, typer.Option("--before", help="The cursor a previous page printed: the jobs "
                                                                "after it.")] = None,
    as_json: Json = False,
) -> None:
    """List jobs, newest first (--limit at a time; the next page with --before)."""
    c = client()
    page = c.jobs_page(status=[s.upper() for s in status or []], name=name, name_contains=name_contains,
                       tenant=tenant, limit=limit, before=before,
                       array=resolve_job(c, array) if array is not None else None)
    jobs = page["jobs"]
    if as_json:
        print_json(jobs)
        return
    table = Table(title=f"{len(jobs)} job(s)")
    id_column(table)
    for col in ("name", "tenant", "status", "learners x gpus", "submitted", "why"):
        table.add_column(col)
    for j in jobs:
        why = j["wait_reason"] if j["status"] == "QUEUED" else j["status_reason"]
        add_row(table, j["id"], j["name"], j["tenant"], j["status"], f"{j['learners']} x {j['gpus_per_learner']}",
                when(j["submitted_at"]), why)
    console.print(table)
    if page.get("next_cursor"):
        err_console.print(f"[dim]more: loadmaster job list --before {esc(page['next_cursor'])}[/]", highlight=False,
                          soft_wrap=True)


@app.command("show")
@remote
def show(job_id: JobArg, as_json: Json = False) -> None:
    """A job: status, history, attempts, progress, allocation, place in the queue."""
    c = client()
    j = c.job(resolve_job(c, job_id))
    if as_json:
        print_json(j)
        return
    console.print(f"[bold]{esc(j['id'])}[/] {esc(j['name'])} (tenant {esc(j['tenant'])}): [bold]{esc(j['status'])}[/]"
                  f" {esc(j['status_reason'])}", highlight=False)
    console.print(f"  {j['learners']} learner(s) x {j['gpus_per_learner']} GPU(s), priority {j['priority']}; "
                  f"submitted {when(j['submitted_at'])}; attempts {j['attempts']}, failures {j['failures']}, "
                  f"preemptions {j['preemptions']}", highlight=False)
    if j.get("array_job"):
        console.print(f"  array {esc(j['array_job'])}, index {j['array_index']} (`job list --array "
                      f"{esc(j['array_job'])}` lists its tasks)", highlight=False)
    needs = [f"{kind} {', '.join(j['manifest'][kind])}" for kind in ("after", "afterany", "afterok")
             if j["manifest"].get(kind)]
    if needs:
        console.print(f"  depends on: {esc('; '.join(needs))}", highlight=False)
    pending = [n for n in ("cancel", "halt") if j[f"{n}_requested"]]
    if j["target_learners"] is not None:
        pending.append(f"scale to {j['target_learners']}")
    if pending:
        console.print(f"  pending: {', '.join(pending)}", highlight=False)
    if j["queue"]:
        q = j["queue"]
        guess = " (its run time is a guess: 1 h, as it gave no expected_duration_s)" if q.get("duration_guessed") \
            else ""
        console.print(f"  queue position {q['position']}, waiting: {esc(q['wait_reason'])}, estimated start "
                      f"{in_(q['estimated_start_at'])}{guess}", highlight=False)
    p = j["progress"]
    if p["last_step"] is not None or p["work_done_s"]:
        console.print(f"  progress: step {p['last_step']}, {duration(p['work_done_s'])} of work, checkpoint at "
                      f"step {p['checkpoint_step']}, expected {duration(p['expected_duration_s'] or 0)}",
                      highlight=False)
    if j["allocation"]:
        where = ", ".join(f"rank {lr['rank']} on {lr['node']} GPUs {lr['gpu_ids']}"
                          for lr in j["allocation"]["learners"])
        console.print(f"  running: {esc(where)}", highlight=False)
    history = Table(title="history")
    for col in ("at", "from", "to", "reason"):
        history.add_column(col)
    for h in j["history"]:
        add_row(history, when(h["at"]), h["from_status"] or "", h["to_status"], h["reason"])
    console.print(history)
    if j["attempt_history"]:
        attempts = Table(title="attempts")
        for col in ("#", "started", "ran", "outcome", "exit codes", "failure class", "retry decision"):
            attempts.add_column(col)
        for a in j["attempt_history"]:
            ran = duration((a["ended_at"] or a["started_at"]) - a["started_at"]) if a["ended_at"] else "running"
            codes = " ".join(f"{e['rank']}:{e['exit_code']}" for e in a["exit_codes"])
            add_row(attempts, a["number"], when(a["started_at"]), ran, a["outcome"], codes,
                    a["failure_category"] or "", a["retry_decision"] or "")
        console.print(attempts)


@app.command("logs")
@remote
def logs(
    job_id: JobArg,
    follow_: Annotated[bool, typer.Option("--follow", "-f", help="Stream new lines live (the next attempts "
                                                                 "too, unless --attempt).")] = False,
    rank: Annotated[int | None, typer.Option("--rank", min=0, help="One learner's log.")] = None,
    attempt: Annotated[int | None, typer.Option("--attempt", min=1, help="Default: the latest.")] = None,
    tail: Annotated[int | None, typer.Option("--tail", min=0, help="Only the last N lines (per rank).")] = None,
) -> None:
    """A job's logs (stdout and stderr of each learner)."""
    c = client()
    job_id = resolve_job(c, job_id)
    if follow_:
        follow(c, job_id, attempt=attempt, rank=rank, tail=tail, every_attempt=attempt is None)
        return
    out = c.logs(job_id, attempt=attempt, rank=rank, tail=tail)
    if out["attempt"] is None:
        err_console.print(f"job {esc(job_id)} has not started an attempt yet", highlight=False)
        return
    prefix = len(out["ranks"]) > 1
    for r in out["ranks"]:
        if r["truncated"] and tail is None:
            err_console.print(f"[dim](rank {r['rank']}: earlier lines left out)[/]", highlight=False)
        _print_lines(r["rank"], r["lines"], prefix)


def _act(job_id: str, verb: str, as_json: bool) -> None:
    c = client()
    j = c.action(resolve_job(c, job_id), verb)
    if as_json:
        print_json(j)
        return
    flag = {"cancel": "cancel_requested", "halt": "halt_requested"}.get(verb)
    if flag and j[flag]:
        console.print(f"{esc(j['id'])}: {verb} requested; its learners are being stopped (status {esc(j['status'])} "
                      "until they exit)", highlight=False)
    else:
        console.print(f"{esc(j['id'])}: {esc(j['status'])}", highlight=False)


@app.command("wait")
@remote
def wait(
    job_ids: Annotated[list[str], typer.Argument(help="Jobs to wait for (ids or unique prefixes).")],
    timeout: Annotated[float | None, typer.Option("--timeout", min=0, help="Give up after this many seconds "
                                                                           f"(exit {WAIT_TIMED_OUT}).")] = None,
    interval: Annotated[float, typer.Option("--interval", min=0.1, max=300, help="Seconds between "
                                                                                 "looks.")] = 2.0,
    as_json: Json = False,
) -> None:
    """Wait until the jobs end. Exit 0 if every one COMPLETED, 1 if any FAILED or was CANCELLED, 124 when
    --timeout ran out first. A halted job is waited for (it may be resumed)."""
    from loadmaster.platform.client import ClientError

    c = client()
    ids = list(dict.fromkeys(resolve_job(c, j) for j in job_ids))
    deadline = None if timeout is None else time.monotonic() + timeout
    ended: dict[str, str] = {}
    noted: dict[str, str] = {}  # the last status said aloud for a job still waited for
    unreachable = False
    while True:
        for job_id in [j for j in ids if j not in ended]:
            try:
                status = str(c.job(job_id)["status"])
            except ClientError as err:
                if err.status is not None:  # the API answered: the job is not this token's, or gone
                    raise
                if not unreachable:  # a server restarting: keep waiting for it
                    err_console.print(f"[dim]{esc(err)}; still waiting[/]", highlight=False, soft_wrap=True)
                unreachable = True
                break
            unreachable = False
            if status in TERMINAL:
                ended[job_id] = status
                if not as_json:
                    colour = "green" if status == "COMPLETED" else "red"
                    console.print(f"{esc(job_id)} [{colour}]{esc(status)}[/]", highlight=False)
            elif status == "HALTED" and noted.get(job_id) != status and not as_json:
                err_console.print(f"[dim]{esc(job_id)} is HALTED: waiting for `loadmaster job resume`[/]",
                                  highlight=False)
            noted[job_id] = status
        if len(ended) == len(ids):
            break
        if deadline is not None and time.monotonic() >= deadline:
            if as_json:
                print_json({j: ended.get(j, noted.get(j)) for j in ids})
            err_console.print(f"timed out after {timeout:g} s; still running: "
                              f"{esc(', '.join(j for j in ids if j not in ended))}", highlight=False, soft_wrap=True)
            raise typer.Exit(WAIT_TIMED_OUT)
        time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))
    if as_json:
        print_json(ended)
    if any(status != "COMPLETED" for status in ended.values()):
        raise typer.Exit(1)


@app.command("cancel")
@remote
def cancel(job_id: JobArg, array: Annotated[bool, typer.Option("--array", help="Cancel every unfinished task of "
                                                                               "the array JOB names (scancel "
                                                                               "ARRAY_ID).")] = False,
           as_json: Json = False) -> None:
    """Cancel a job (a running one once its learners have stopped)."""
    if not array:
        _act(job_id, "cancel", as_json)
        return
    from loadmaster.platform.client import ClientError

    c = client()
    array_id = resolve_job(c, job_id)
    tasks = c.jobs(array=array_id, limit=10_000)
    if not tasks:
        fail(f"{job_id} is not an array of this token's (`job show` names a task's array)")
    out = []
    for task in tasks:
        if task["status"] in TERMINAL:
            continue
        try:
            out.append(c.action(task["id"], "cancel"))
        except ClientError as err:
            if err.status != 409:  # 409: it ended meanwhile
                raise
    if as_json:
        print_json(out)
    else:
        console.print(f"array {esc(array_id)}: cancel requested for {len(out)} of its {len(tasks)} task(s)",
                      highlight=False)


@app.command("halt")
@remote
def halt(job_id: JobArg, as_json: Json = False) -> None:
    """Halt a job; `job resume` continues it from its latest checkpoint."""
    _act(job_id, "halt", as_json)


@app.command("resume")
@remote
def resume(job_id: JobArg, as_json: Json = False) -> None:
    """Resume a halted job (it queues again)."""
    _act(job_id, "resume", as_json)


@app.command("scale")
@remote
def scale(job_id: JobArg, learners: Annotated[int, typer.Argument(min=1, help="The new number of learners.")],
          as_json: Json = False) -> None:
    """Resize an elastic job (within its elastic min..max learners)."""
    c = client()
    j = c.scale(resolve_job(c, job_id), learners)
    if as_json:
        print_json(j)
    elif j["target_learners"] is not None:
        console.print(f"{esc(j['id'])}: resizing from {j['learners']} to {j['target_learners']} learners "
                      "(checkpoint and restart when the cluster allows)", highlight=False)
    else:
        console.print(f"{esc(j['id'])}: {j['learners']} learners ({esc(j['status'])})", highlight=False)
