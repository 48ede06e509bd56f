"""A learner for the executor tests: `python executor_learner.py MODE [ARGS...]` (stdlib only).

Modes:
  env                 print the learner's environment (the runtime contract) as JSON and exit 0
  fail RANK CODE      the learner of rank RANK exits CODE after a moment; the others sleep (until stopped)
  trap                on SIGTERM say whether the preempt file exists and exit 0; print "ready" once armed
  ignore              ignore SIGTERM and sleep; print "ready" once armed
  mixed               rank 0 as trap, the others as ignore
  go DIR              report a step every 50 ms until DIR/go-RANK exists, then exit with the code in it
  partial DIR         report a step and half of the next, wait for DIR/go-RANK, finish it, add a line that
                      is not JSON and a last line without its newline
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

RANK = int(os.environ["RANK"])


def report(text: str) -> None:
    with open(os.environ["LOADMASTER_REPORT_FILE"], "a") as f:
        f.write(text)


def wait_go(directory: str) -> int:
    go = Path(directory) / f"go-{RANK}"
    while not go.exists():
        time.sleep(0.02)
    time.sleep(0.02)  # the test writes the file whole, but give a slow disk a moment
    return int(go.read_text() or "0")


def on_term(signum: int, frame: FrameType | None) -> None:
    print(f"SIGTERM preempt={Path(os.environ['LOADMASTER_PREEMPT_FILE']).exists()}", flush=True)
    sys.exit(0)


def main(mode: str, *args: str) -> int:
    if mode == "env":
        print(json.dumps(dict(os.environ)), flush=True)
        return 0
    if mode == "fail":
        if int(args[0]) == RANK:
            time.sleep(0.2)
            return int(args[1])
        time.sleep(120)
        return 0
    if mode == "mixed":
        mode = "trap" if RANK == 0 else "ignore"
    if mode in ("trap", "ignore"):
        signal.signal(signal.SIGTERM, on_term if mode == "trap" else signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(120)
        return 0
    if mode == "go":
        step = 0
        go = Path(args[0]) / f"go-{RANK}"
        while not go.exists():
            step += 1
            report(json.dumps({"step": step, "rank": RANK}) + "\n")
            time.sleep(0.05)
        return wait_go(args[0])
    if mode == "partial":
        report('{"step": 1}\n{"step": ')
        print("ready", flush=True)
        wait_go(args[0])
        report('2}\nnot json\n{"step": 3}')
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
