"""A small Philly job log whose every figure is worked out by hand (see HAND_TRACE below)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from loadmaster.core.cluster import Cluster, Node

T0 = datetime(2017, 10, 1)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")


def attempt(start: float, end: float, machines: list[tuple[str, list[int]]] | None) -> dict[str, Any]:
    detail = [{"ip": m, "gpus": [f"gpu{g}" for g in gpus]} for m, gpus in machines or []]
    return {"start_time": stamp(start), "end_time": stamp(end), "detail": detail}


def job(jobid: str, vc: str, submit: float, attempts: list[dict[str, Any]], status: str = "Pass",
        user: str = "u1") -> dict[str, Any]:
    return {"status": status, "vc": vc, "jobid": jobid, "submitted_time": stamp(submit), "user": user,
            "attempts": attempts}


# Three servers of 4 GPUs; VC shares a=4, b=4, c=4, d=12. Times in seconds from T0.
#   J1 a 4 GPUs m1          [0, 1000)
#   J2 a 2 GPUs m1 0-1      submitted 100, runs [1000, 1500): waits 900 s while VC a holds 4 (fair share)
#   J3 b 2 GPUs m2 0-1      [0, 2000)
#   J4 b 2 GPUs m3 0-1      [0, 3000)
#   J6 c 4 GPUs m2+m3 2-3   submitted 300, runs [700, 1200) on 2+2: in [300, 700) two servers had 2 free
#                           but none had 4: it waited 400 s for locality it then gave up
#   J5 c 4 GPUs m2 0-3      submitted 200, runs [2000, 2500). Its 1,800 s wait: [200, 700) no server
#                           with 4 free (fragmentation 500); [700, 1200) VC c holds J6's 4 (fair share
#                           500); [1200, 1500) servers have 2+2+2 free (fragmentation 300); [1500, 2000)
#                           m1 is empty yet it waits (unexplained 500)
#   J7 d 8 GPUs m1+m3 0-3   submitted 400, runs [3000, 4000). Its 2,600 s wait: fewer than 8 free in
#                           [400, 1500) and [2000, 2500) (capacity 1,600); 8 free in [1500, 2000) but only
#                           one server with 4 (fragmentation 500); room for it in [2500, 3000) (500)
#   J8 a 2 GPUs m1 0-1      [5000, 5060), Failed: runtime to failure 60 s
#   J9 b 2 GPUs             attempt [6000, 6100) with no machines logged, fails; retried on m2 0-1
#                           [6200, 6500) and passes: 100 s to failure, a 100 s gap before the retry
HAND_TRACE: list[dict[str, Any]] = [
    job("J1", "a", 0, [attempt(0, 1000, [("m1", [0, 1, 2, 3])])]),
    job("J2", "a", 100, [attempt(1000, 1500, [("m1", [0, 1])])]),
    job("J3", "b", 0, [attempt(0, 2000, [("m2", [0, 1])])]),
    job("J4", "b", 0, [attempt(0, 3000, [("m3", [0, 1])])]),
    job("J5", "c", 200, [attempt(2000, 2500, [("m2", [0, 1, 2, 3])])], user="u2"),
    job("J6", "c", 300, [attempt(700, 1200, [("m2", [2, 3]), ("m3", [2, 3])])], user="u2"),
    job("J7", "d", 400, [attempt(3000, 4000, [("m1", [0, 1, 2, 3]), ("m3", [0, 1, 2, 3])])], user="u3"),
    job("J8", "a", 5000, [attempt(5000, 5060, [("m1", [0, 1])])], status="Failed"),
    job("J9", "b", 6000, [attempt(6000, 6100, None), attempt(6200, 6500, [("m2", [0, 1])])]),
]
HAND_SHARES = {"a": 4.0, "b": 4.0, "c": 4.0, "d": 12.0}
# GPU-seconds of every attempt: J1 4000, J2 1000, J3 4000, J4 6000, J5 2000, J6 2000, J7 8000, J8 120,
# J9 200 + 600.
HAND_GPU_S = 27920.0
HAND_END_S = 6500.0


def hand_cluster() -> Cluster:
    return Cluster(tuple(Node(f"m{i}", 4, 16, 64) for i in (1, 2, 3)), name="hand")


def write_log(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(records, indent=1))
    return path


def write_machine_list(path: Path) -> Path:
    path.write_text("machineId, number of GPUs, single GPU mem\n" + "".join(f"m{i},4, 24GB\n" for i in (1, 2, 3)))
    return path
