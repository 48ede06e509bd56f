"""loadmaster.runtime: environment parsing, atomic checkpoints, should_preempt() (preempt file and a real
SIGTERM to a real process) and report() lines."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from loadmaster import runtime
from loadmaster.runtime import env
from loadmaster.runtime.context import RuntimeContext, RuntimeEnvError

SRC = Path(__file__).parents[2] / "src"
RUNTIME_SRC = SRC / "loadmaster" / "runtime"
ALL_VARS = [value for name, value in vars(env).items() if name.isupper() and isinstance(value, str)]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test starts as a learner running alone, in its own directory."""
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


# --- environment --------------------------------------------------------------------------------------


def test_defaults_outside_the_platform() -> None:
    context = RuntimeContext.from_environ({})
    assert (context.rank, context.world_size, context.local_rank, context.attempt) == (0, 1, 0, 1)
    assert context.job_id is None and not context.on_platform
    assert context.report_file is None and context.preempt_file is None and context.data_dir is None
    assert (runtime.rank(), runtime.world_size(), runtime.local_rank(), runtime.attempt()) == (0, 1, 0, 1)
    assert runtime.job_id() is None and runtime.data_dir() is None


def test_full_platform_environment(tmp_path: Path) -> None:
    context = RuntimeContext.from_environ({
        env.RANK: "3", env.WORLD_SIZE: "4", env.LOCAL_RANK: "1", env.LOCAL_WORLD_SIZE: "2",
        env.JOB_ID: "job-7", env.ATTEMPT: "2", env.CHECKPOINT_DIR: str(tmp_path / "ckpt"),
        env.DATA_DIR: str(tmp_path / "data"), env.RESULTS_DIR: str(tmp_path / "results"),
        env.REPORT_FILE: str(tmp_path / "reports" / "rank-3.jsonl"), env.PREEMPT_FILE: str(tmp_path / "preempt"),
    })
    assert (context.rank, context.world_size, context.local_rank, context.local_world_size) == (3, 4, 1, 2)
    assert context.job_id == "job-7" and context.attempt == 2 and context.on_platform
    assert context.checkpoint_dir == tmp_path / "ckpt"
    assert context.data_dir == tmp_path / "data"
    assert context.results_dir == tmp_path / "results"
    assert context.report_file == tmp_path / "reports" / "rank-3.jsonl"
    assert context.preempt_file == tmp_path / "preempt"


def test_module_functions_read_the_live_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.RANK, "1")
    monkeypatch.setenv(env.WORLD_SIZE, "2")
    monkeypatch.setenv(env.LOCAL_RANK, "1")
    monkeypatch.setenv(env.JOB_ID, "j1")
    monkeypatch.setenv(env.ATTEMPT, "5")
    monkeypatch.setenv(env.DATA_DIR, "/data/j1")
    assert (runtime.rank(), runtime.world_size(), runtime.local_rank()) == (1, 2, 1)
    assert runtime.job_id() == "j1" and runtime.attempt() == 5 and runtime.data_dir() == Path("/data/j1")


def test_empty_values_count_as_unset() -> None:
    context = RuntimeContext.from_environ({env.RANK: "", env.WORLD_SIZE: " ", env.JOB_ID: "", env.REPORT_FILE: ""})
    assert (context.rank, context.world_size, context.job_id, context.report_file) == (0, 1, None, None)


@pytest.mark.parametrize(("environ", "named"), [
    ({env.RANK: "abc", env.WORLD_SIZE: "2"}, "RANK='abc'"),
    ({env.RANK: "2", env.WORLD_SIZE: "2"}, "RANK=2 is not below WORLD_SIZE=2"),
    ({env.RANK: "-1"}, "RANK=-1"),
    ({env.WORLD_SIZE: "0"}, "WORLD_SIZE=0"),
    ({env.WORLD_SIZE: "1.5"}, "WORLD_SIZE='1.5'"),
    ({env.ATTEMPT: "0"}, "LOADMASTER_ATTEMPT=0"),
    ({env.LOCAL_RANK: "2", env.LOCAL_WORLD_SIZE: "2"}, "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"),
])
def test_bad_variables_name_the_variable(environ: dict[str, str], named: str) -> None:
    with pytest.raises(RuntimeEnvError, match=named.replace(".", r"\.")):
        RuntimeContext.from_environ(environ)


def test_init_checks_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.RANK, "x")
    with pytest.raises(RuntimeEnvError, match="RANK"):
        runtime.init()


def test_directories_default_argument_and_platform(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert runtime.checkpoint_dir() == Path("checkpoints") and Path("checkpoints").is_dir()
    assert runtime.results_dir() == Path("results") and Path("results").is_dir()
    assert runtime.checkpoint_dir(tmp_path / "mine") == tmp_path / "mine" and (tmp_path / "mine").is_dir()
    assert runtime.results_dir(tmp_path / "out") == tmp_path / "out"
    # The platform's directories win over the script's own choice: it resumes from and collects there.
    monkeypatch.setenv(env.CHECKPOINT_DIR, str(tmp_path / "platform-ckpt"))
    monkeypatch.setenv(env.RESULTS_DIR, str(tmp_path / "platform-results"))
    assert runtime.checkpoint_dir(tmp_path / "mine") == tmp_path / "platform-ckpt"
    assert runtime.results_dir(tmp_path / "out") == tmp_path / "platform-results"
    assert (tmp_path / "platform-ckpt").is_dir() and (tmp_path / "platform-results").is_dir()


# --- checkpoints --------------------------------------------------------------------------------------


def test_save_and_find_checkpoints(tmp_path: Path) -> None:
    assert runtime.latest_checkpoint(tmp_path / "missing") is None
    first = runtime.save_checkpoint(b"one", 10, directory=tmp_path)
    second = runtime.save_checkpoint(lambda path: path.write_bytes(b"two"), 20, directory=tmp_path)
    assert first.name == "step-000000000010.ckpt" and first.read_bytes() == b"one"
    assert runtime.latest_checkpoint(tmp_path) == second and second.read_bytes() == b"two"
    assert runtime.checkpoint_step(second) == 20
    assert runtime.list_checkpoints(tmp_path) == [first, second]
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name, second.name]  # no temporary left


def test_latest_ignores_a_torn_temporary_file(tmp_path: Path) -> None:
    complete = runtime.save_checkpoint(b"good", 5, directory=tmp_path)
    torn = tmp_path / ".step-000000000099.ckpt.tmp-4242-deadbeef"  # a newer step, killed while writing
    torn.write_bytes(b"half a checkp")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    assert runtime.latest_checkpoint(tmp_path) == complete
    assert runtime.list_checkpoints(tmp_path) == [complete]


def test_checkpoint_dir_comes_from_the_platform(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(env.CHECKPOINT_DIR, str(tmp_path / "ckpt"))
    saved = runtime.save_checkpoint(b"x", 3)
    assert saved == tmp_path / "ckpt" / "step-000000000003.ckpt"
    assert runtime.latest_checkpoint() == saved


def test_default_checkpoint_dir_outside_the_platform() -> None:
    saved = runtime.save_checkpoint(b"x", 1)
    assert saved == Path("checkpoints") / "step-000000000001.ckpt"


def test_saving_a_step_again_replaces_it(tmp_path: Path) -> None:
    runtime.save_checkpoint(b"old", 7, directory=tmp_path)
    again = runtime.save_checkpoint(b"new", 7, directory=tmp_path)
    assert again.read_bytes() == b"new" and runtime.list_checkpoints(tmp_path) == [again]


def test_keep_prunes_old_checkpoints_and_old_torn_files(tmp_path: Path) -> None:
    old_torn = tmp_path / ".step-000000000001.ckpt.tmp-1-aaaa"
    new_torn = tmp_path / ".step-000000000050.ckpt.tmp-1-bbbb"  # may be a writer in flight: kept
    old_torn.write_bytes(b"x")
    new_torn.write_bytes(b"x")
    for step in (2, 4, 6, 8):
        runtime.save_checkpoint(b"s", step, directory=tmp_path, keep=2)
    assert [runtime.checkpoint_step(p) for p in runtime.list_checkpoints(tmp_path)] == [6, 8]
    assert not old_torn.exists() and new_torn.exists()
    for step in (9, 10):
        runtime.save_checkpoint(b"s", step, directory=tmp_path, keep=None)
    assert [runtime.checkpoint_step(p) for p in runtime.list_checkpoints(tmp_path)] == [6, 8, 9, 10]


def test_a_failing_writer_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    good = runtime.save_checkpoint(b"good", 1, directory=tmp_path)

    def crash(path: Path) -> None:
        path.write_bytes(b"partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        runtime.save_checkpoint(crash, 2, directory=tmp_path)
    assert runtime.latest_checkpoint(tmp_path) == good
    assert [p.name for p in tmp_path.iterdir()] == [good.name]
    with pytest.raises(ValueError, match="wrote no file"):
        runtime.save_checkpoint(lambda path: None, 3, directory=tmp_path)
    assert runtime.latest_checkpoint(tmp_path) == good


@pytest.mark.parametrize("step", [-1, 1.5, True, "3"])
def test_bad_steps_are_refused(tmp_path: Path, step: object) -> None:
    with pytest.raises(ValueError, match="step="):
        runtime.save_checkpoint(b"x", step, directory=tmp_path)  # type: ignore[arg-type]


def test_bad_keep_and_bad_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep=0"):
        runtime.save_checkpoint(b"x", 1, directory=tmp_path, keep=0)
    with pytest.raises(ValueError, match="not a checkpoint name"):
        runtime.checkpoint_step(tmp_path / "model.pt")


def test_a_learner_killed_mid_write_leaves_the_last_complete_checkpoint(tmp_path: Path) -> None:
    """A real process is SIGKILLed while its writer is half-way: only a temporary file is left behind."""
    script = f"""
        import sys, time
        from pathlib import Path
        from loadmaster import runtime
        runtime.save_checkpoint(b"complete", 1, directory={str(tmp_path)!r})

        def slow(path: Path) -> None:
            with path.open("wb") as out:
                out.write(b"half")
                out.flush()
                print("writing", flush=True)
                time.sleep(60)

        runtime.save_checkpoint(slow, 2, directory={str(tmp_path)!r})
    """
    child = _spawn(script, {})
    try:
        assert _read_line(child) == "writing"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        _reap(child)
    latest = runtime.latest_checkpoint(tmp_path)
    assert latest is not None and runtime.checkpoint_step(latest) == 1 and latest.read_bytes() == b"complete"
    assert any(p.name.startswith(".step-000000000002.ckpt.tmp-") for p in tmp_path.iterdir())


# --- should_preempt -----------------------------------------------------------------------------------

# The learner side of the preemption tests: says "ready" once it watches, then polls should_preempt()
# as a training loop would between steps, and exits 0 once asked to stop.
LEARNER = """
    import sys, time
    from loadmaster import runtime
    {setup}
    print("ready", runtime.should_preempt(), flush=True)
    deadline = time.monotonic() + 30
    while not runtime.should_preempt():
        if time.monotonic() > deadline:
            print("never asked to stop", flush=True)
            sys.exit(3)
        time.sleep(0.01)
    {after}
    print("stopping", runtime.should_preempt(), flush=True)
"""


def test_should_preempt_once_the_preempt_file_appears(tmp_path: Path) -> None:
    preempt_file = tmp_path / "attempt-1" / "preempt"
    preempt_file.parent.mkdir()
    script = LEARNER.format(setup="runtime.init()", after="import os; os.remove(sys.argv[1])")
    child = _spawn(script, {env.PREEMPT_FILE: str(preempt_file)}, str(preempt_file))
    try:
        assert _read_line(child) == "ready False"
        time.sleep(0.1)
        assert child.poll() is None  # still training: nothing asked it to stop
        preempt_file.touch()
        out, _ = child.communicate(timeout=30)
    finally:
        _reap(child)
    # The learner removed the file again: the request stays seen (sticky).
    assert child.returncode == 0 and out.strip() == "stopping True"


def test_should_preempt_after_a_real_sigterm_chaining_the_previous_handler() -> None:
    setup = """
    import signal
    def earlier(signum, frame):
        print("earlier handler ran", flush=True)
    signal.signal(signal.SIGTERM, earlier)
    runtime.init()
    """
    child = _spawn(LEARNER.format(setup=textwrap.dedent(setup).strip().replace("\n", "\n    "), after=""), {})
    try:
        assert _read_line(child) == "ready False"
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=30)
    finally:
        _reap(child)
    assert child.returncode == 0
    assert out.split("\n")[:2] == ["earlier handler ran", "stopping True"]


def test_first_should_preempt_call_installs_the_handler_lazily() -> None:
    child = _spawn(LEARNER.format(setup="", after=""), {})  # no init(): should_preempt() in "ready" installs
    try:
        assert _read_line(child) == "ready False"
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=30)
    finally:
        _reap(child)
    assert child.returncode == 0 and out.strip() == "stopping True"


def test_without_the_runtime_sigterm_still_kills() -> None:
    """The control: the exit-0 above is the runtime's doing, not the default disposition."""
    child = _spawn('print("ready", flush=True)\nimport time\ntime.sleep(30)', {})
    try:
        assert _read_line(child) == "ready"
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=10)
    finally:
        _reap(child)
    assert child.returncode == -signal.SIGTERM


# --- report -------------------------------------------------------------------------------------------


def test_report_outside_the_platform_writes_nothing(tmp_path: Path) -> None:
    runtime.report(step=1, loss=0.5)
    assert list(tmp_path.iterdir()) == []


def test_report_appends_one_json_line_per_call(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    report_file = tmp_path / "reports" / "rank-1.jsonl"
    monkeypatch.setenv(env.REPORT_FILE, str(report_file))
    monkeypatch.setenv(env.RANK, "1")
    monkeypatch.setenv(env.WORLD_SIZE, "2")

    class Scalar:  # what a numpy scalar or 0-d tensor looks like to report()
        def item(self) -> float:
            return 0.25

    before = time.time()
    runtime.report(step=1, loss=0.5, accuracy=Scalar(), phase="train")
    runtime.report(step=2, loss=float("nan"), sizes=[1, 2.5], extra={"lr": float("inf")}, note=None)
    lines = report_file.read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert before <= first.pop("time") <= time.time()
    assert first == {"step": 1, "rank": 1, "loss": 0.5, "accuracy": 0.25, "phase": "train"}
    second.pop("time")
    assert second == {"step": 2, "rank": 1, "loss": "nan", "sizes": [1, 2.5], "extra": {"lr": "inf"}, "note": None}


def test_report_accepts_numpy_scalars(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    monkeypatch.setenv(env.REPORT_FILE, str(tmp_path / "r.jsonl"))
    runtime.report(step=np.int64(3), loss=np.float32(0.5), seen=np.int64(12))
    record = json.loads((tmp_path / "r.jsonl").read_text())
    assert (record["step"], record["loss"], record["seen"], record["rank"]) == (3, 0.5, 12, 0)
    assert runtime.save_checkpoint(b"x", np.int64(4), directory=tmp_path / "c").name == "step-000000000004.ckpt"
    with pytest.raises(TypeError, match=r"'weights'.*more than one element"):
        runtime.report(step=4, weights=np.zeros(3))


def test_report_refuses_bad_input(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(env.REPORT_FILE, str(tmp_path / "r.jsonl"))
    with pytest.raises(ValueError, match="step"):
        runtime.report(step=-1, loss=1.0)
    with pytest.raises(ValueError, match=r"\['rank', 'time'\]"):
        runtime.report(step=1, time=3.0, rank=0)
    with pytest.raises(TypeError, match="'model'"):
        runtime.report(step=1, model=object())
    assert not (tmp_path / "r.jsonl").exists()


# --- what a learner pulls in --------------------------------------------------------------------------


def test_runtime_imports_only_the_standard_library() -> None:
    for path in RUNTIME_SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                top = name.split(".")[0]
                ok = top in sys.stdlib_module_names or top == "__future__" or name.startswith("loadmaster.runtime")
                assert ok, f"runtime/{path.name} imports {name}"


def test_importing_the_runtime_loads_nothing_of_the_server() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, loadmaster.runtime; print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=60, check=True,
    )
    loaded = set(probe.stdout.split())
    heavy = {"numpy", "pydantic", "yaml", "fastapi", "sqlalchemy", "typer", "rich", "matplotlib", "httpx", "ray"}
    assert not heavy & loaded
    assert {m for m in loaded if m.startswith("loadmaster.")} <= {
        m for m in loaded if m.startswith("loadmaster.runtime")
    }


# --- helpers ------------------------------------------------------------------------------------------


def _spawn(script: str, extra_env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ALL_VARS}
    environ.update(extra_env, PYTHONPATH=str(SRC))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ,
    )


def _read_line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if not line and child.poll() is not None:
        pytest.fail(f"the learner exited with {child.returncode} before saying anything")
    return line


def _reap(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.kill()
        child.wait(timeout=10)
    if child.stdout is not None:
        child.stdout.close()
