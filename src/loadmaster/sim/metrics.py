"""Summary statistics of a simulation: the summary.json contract and the jobs.csv rows."""

from __future__ import annotations

import csv
import itertools
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from loadmaster.core.job import JobStatus
from loadmaster.scheduling.plan import WaitReason
from loadmaster.sim.records import JobRecord
from loadmaster.sim.simulator import SimResult

# A metric's values: a list of floats, or the array _floats() made of one.
Values = list[float] | npt.NDArray[np.float64]


def _floats(values: list[float]) -> npt.NDArray[np.float64]:
    """The list as an array of the same floats. np.mean() and np.percentile() of a list convert it anew at each
    call, and np.array() looks at the type of every element (on 117,000 jobs, a third of summarize()):
    np.fromiter() of a known length and type does not."""
    return np.fromiter(values, np.float64, len(values))


def _pct(values: Values, q: int) -> float:
    """np.percentile(values, q) (its default, linear method) bit for bit, for an integer q in [0, 100], without
    its np.unique() call, which imports numpy.ma (~10 ms of a short run's process): the same virtual index,
    neighbours and gamma (`_get_indexes`, `_get_gamma`), the same lerp in the same float operations
    (`_lerp`), NaN where the values hold one (tests/sim/test_metrics_pct.py compares the two)."""
    if len(values) == 0:
        return 0.0
    arr = np.array(values)  # a copy: partitioned in place
    n = arr.size
    virtual = (n - 1) * (q / 100)
    if virtual >= n - 1:  # at or past the last index: numpy's -1 for both neighbours, gamma from it
        lo = hi = -1
    else:
        lo = math.floor(virtual)
        hi = lo + 1
    gamma = virtual - lo
    arr.partition(sorted({0, n - 1, lo % n, hi % n}))
    if arr.dtype.kind == "f" and math.isnan(arr[n - 1]):
        return math.nan
    a, b = arr[lo].item(), arr[hi].item()
    diff = b - a
    lerp = b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma
    return float(lerp)


def _mean(values: Values) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def jain_index(values: Values) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one gets everything."""
    if len(values) == 0:
        return 1.0
    x = np.asarray(values, dtype=float)
    denom = len(x) * float((x * x).sum())
    return float(x.sum() ** 2 / denom) if denom > 0 else 1.0


def delay_classes(record: JobRecord) -> dict[str, float]:
    """Waiting time split into Philly's classes: fair_share, fragmentation, capacity."""
    out = {"fair_share": 0.0, "fragmentation": 0.0, "capacity": 0.0}
    for reason, seconds in record.wait_s.items():
        out[_DELAY_CLASS.get(reason, "capacity")] += seconds  # a reason that is no WaitReason: capacity
    return out


# Asked once per reason per job (jobs.csv, summary.json): a lookup instead of an Enum by value each time.
_DELAY_CLASS = {reason.value: reason.delay_class for reason in WaitReason}


def _split_wait(wait: dict[str, float]) -> tuple[float, float, float]:
    """A job's waiting seconds split into fair-share, fragmentation and capacity delay (in the wait's order,
    so the sums are the same to the last bit wherever they are made)."""
    fair = frag = cap = 0.0
    for reason, seconds in wait.items():
        cls = _DELAY_CLASS.get(reason, "capacity")
        if cls == "fair_share":
            fair += seconds
        elif cls == "fragmentation":
            frag += seconds
        else:
            cap += seconds
    return fair, frag, cap


def summarize(result: SimResult, wall_time_s: float) -> dict[str, Any]:
    """The summary.json keys (../shared/DESIGN.md), plus the delay split and failure accounting."""
    records = result.records
    # One pass over the records instead of one per key through their properties (117,000 records cost
    # half a second that way). Every number is added in the order it was before: the float results are
    # the same to the last bit (sums of lists stay sum() of the same lists).
    status = Counter[JobStatus]()
    jcts: list[float] = []
    completed_jcts: list[float] = []
    delays: list[float] = []
    rhos: list[float] = []
    gpu_s: list[float] = []
    failed_s: list[float] = []
    lost_s: list[float] = []
    attempts: list[int] = []
    first_submit = last_finish = None
    fair = frag = cap = 0.0
    reasons: dict[str, float] = {}
    rejected = unfinished = 0
    completed = JobStatus.COMPLETED
    for r in records:
        submit = r.spec.submit_time_s
        first, finish = r.first_start_s, r.finish_s
        status[r.status] += 1
        if first_submit is None or submit < first_submit:
            first_submit = submit
        if finish is None:
            unfinished += 1
        elif last_finish is None or finish > last_finish:
            last_finish = finish
        if first is not None:
            delays.append(first - submit)
            if finish is not None:
                jct = finish - submit
                jcts.append(jct)
                if r.status is completed:
                    completed_jcts.append(jct)
                if r.ideal_s > 0:
                    rhos.append(jct / r.ideal_s)
        wait = r.wait_s
        if wait:
            f, g, c = _split_wait(wait)
            for reason, seconds in wait.items():
                reasons[reason] = seconds + reasons.get(reason, 0)
            fair += f
            frag += g
            cap += c
        if r.reject_reason:
            rejected += 1
        gpu_s.append(r.gpu_s)
        failed_s.append(r.gpu_s_failed)
        lost_s.append(r.gpu_s_lost)
        attempts.append(r.attempts_run)
    if first_submit is None:
        first_submit = 0.0
    if last_finish is None:
        last_finish = first_submit
    jcts_a, completed_a, delays_a, rhos_a = map(_floats, (jcts, completed_jcts, delays, rhos))
    makespan = max(0.0, last_finish - first_submit)
    capacity_gpu_s = result.cluster.total_gpus * max(result.end_s - first_submit, 1e-9)
    total_wait = sum((fair, frag, cap))
    classes = {"fair_share": fair, "fragmentation": frag, "capacity": cap}
    gpu_h = sum(gpu_s) / 3600
    failed_h = sum(failed_s) / 3600
    jobs = len(records)
    return {
        "jobs": jobs,
        "completed": status[JobStatus.COMPLETED],
        "failed": status[JobStatus.FAILED] - rejected,
        "cancelled": status[JobStatus.CANCELLED],
        "rejected": rejected,
        "unfinished": unfinished,
        "still_queued": status[JobStatus.QUEUED],
        "still_running": status[JobStatus.PROCESSING],
        "avg_jct_s": _mean(jcts_a),
        "p50_jct_s": _pct(jcts_a, 50),
        "p99_jct_s": _pct(jcts_a, 99),
        "avg_jct_completed_s": _mean(completed_a),
        "makespan_s": makespan,
        "avg_queue_delay_s": _mean(delays_a),
        "p50_queue_delay_s": _pct(delays_a, 50),
        "p99_queue_delay_s": _pct(delays_a, 99),
        "avg_total_wait_s": total_wait / jobs if jobs else 0.0,
        "fair_share_delay_s": classes["fair_share"] / jobs if jobs else 0.0,
        "fragmentation_delay_s": classes["fragmentation"] / jobs if jobs else 0.0,
        "capacity_delay_s": classes["capacity"] / jobs if jobs else 0.0,
        "fragmentation_delay_share": classes["fragmentation"] / total_wait if total_wait else 0.0,
        "fair_share_delay_share": classes["fair_share"] / total_wait if total_wait else 0.0,
        "wait_by_reason_s": {k: reasons[k] for k in sorted(reasons)},
        "gpu_utilization": min(1.0, result.busy_gpu_s / capacity_gpu_s),
        "max_rho": max(rhos, default=0.0),
        "median_rho": _pct(rhos_a, 50),
        # 1 / rho of each positive rho: numpy divides as Python does, one float at a time.
        "jain_fairness": jain_index(1.0 / rhos_a[rhos_a > 0]),
        "preemptions": result.preemptions,
        "resizes": result.resizes,
        "gpu_hours": gpu_h,
        "gpu_hours_failed_attempts": failed_h,
        "gpu_hours_lost_to_preemption": sum(lost_s) / 3600,
        "attempts": sum(attempts),
        "decisions": result.decisions,
        "wall_time_s": wall_time_s,
        **result.mode_metrics,
    }


JOB_COLUMNS = (
    "job_id", "tenant", "user", "model", "submit_time_s", "learners", "gpus", "duration_s", "status",
    "first_start_s", "finish_s", "jct_s", "queue_delay_s", "total_wait_s", "fair_share_delay_s",
    "fragmentation_delay_s", "capacity_delay_s", "last_wait_reason", "attempts", "preemptions", "resizes", "gpu_hours",
    "gpu_hours_failed", "rho", "failure_categories", "reject_reason",
)


def write_jobs_csv(records: list[JobRecord], path: Path) -> None:
    """One row per job, as csv.writer writes it. Written for speed (117,000 rows cost about a second through
    the record's properties, delay_classes() and csv.writer): the same values worked out inline, and each
    row made by one %-format of a template (_row_formats(): one C call formats every number of the row,
    f"{x:.6g}" each; a zero delay is a literal "0" of the template, see _row_formats()); a row whose text
    needs quoting goes through csv.writer."""
    status_text = {s: s.value for s in JobStatus}  # an enum's .value is a descriptor call per row
    # Per pattern of absent times and zero delays (not started, not finished, no rho, no queueing delay, never
    # waited): the columns' formats and their template.
    formats = {absent: _row_formats(*absent) for absent in itertools.product((False, True), repeat=5)}
    templates = {absent: ",".join(fmts) for absent, fmts in formats.items()}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(JOB_COLUMNS)
        # Rows are joined into one text per batch of _BATCH and written at once; a row that needs quoting
        # writes the batch first, so that rows stay in order.
        batch: list[str] = []

        def flush() -> None:
            if batch:
                f.write("\r\n".join(batch) + "\r\n")
                batch.clear()

        for r in records:
            s = r.spec
            submit = s.submit_time_s
            first, finish = r.first_start_s, r.finish_s
            wait = r.wait_s
            fair: float | str
            frag: float | str
            cap: float | str
            waited: float | str
            if wait:
                fair, frag, cap = _split_wait(wait)
                waited = sum(wait.values())
            else:  # never waited (most jobs of a cluster with room): four zeros, literal in the template
                fair = frag = cap = waited = ""
            queue: float | str = "" if first is None else first - submit
            # Started at once (most jobs of a cluster with room): the template's literal zero, where "%.6g" of
            # the difference is "0" for sure (not -0.0 - 0, as a first start at -0.0 of a job submitted at 0 is).
            no_queue = queue == 0 and submit != 0
            if no_queue:
                queue = ""
            jct = None if finish is None else finish - submit
            rho = None if jct is None or r.ideal_s <= 0 else jct / r.ideal_s
            absent = (first is None, jct is None, rho is None, no_queue, not wait)
            # An absent time is the empty text, written by its column's "%s".
            values = (s.job_id, s.tenant, s.user, s.model, submit, s.learners, s.learners * s.gpus_per_learner,
                      s.duration_s, status_text[r.status], "" if first is None else first,
                      "" if finish is None else finish, "" if jct is None else jct,
                      queue, waited, fair, frag, cap, r.last_wait_reason,
                      r.attempts_run, r.preemptions, r.resizes, r.gpu_s / 3600, r.gpu_s_failed / 3600,
                      "" if rho is None else rho, ";".join(r.failure_categories), r.reject_reason)
            line = templates[absent] % values
            # Three substring tests (memchr) rather than a regex character class, which visits every character
            # through the regex engine: ~0.12 against ~0.9 us a row of 117,000.
            if line.count(",") == _SEPARATORS and '"' not in line and "\r" not in line and "\n" not in line:
                batch.append(line)
                if len(batch) == _BATCH:
                    flush()
            else:
                flush()
                w.writerow([fmt % v for fmt, v in zip(formats[absent], values, strict=True)])
        flush()


def _row_formats(not_started: bool, not_finished: bool, no_rho: bool, no_queue_delay: bool,
                 never_waited: bool) -> tuple[str, ...]:
    """Each jobs.csv column's %-format: text as it is, counts as whole numbers, times and amounts as
    f"{x:.6g}" writes them ("%.6g", the same digits); "%s" for the times a row lacks (given as ""). A zero
    delay (no queueing delay; never waited: the four waits) is "0%s", given "": the "0" that "%.6g" writes
    of 0.0, without formatting a float (~0.5 us each, a quarter of a row's formatting)."""
    started = "%s" if not_started else "%.6g"
    finished = "%s" if not_finished else "%.6g"
    queued = "0%s" if no_queue_delay else started
    waited = "0%s" if never_waited else "%.6g"
    return ("%s", "%s", "%s", "%s", "%.6g", "%d", "%d", "%.6g", "%s", started, finished, finished, queued,
            waited, waited, waited, waited, "%s", "%d", "%d", "%d", "%.6g", "%.6g", "%s" if no_rho else "%.6g",
            "%s", "%s")


# What makes csv.writer (QUOTE_MINIMAL) quote a field: a quote or a line break in it (write_jobs_csv tests
# for each), or a comma (then the joined row holds more commas than the separators).
_SEPARATORS = len(JOB_COLUMNS) - 1
_BATCH = 4096  # rows per write: few calls, and a few hundred KB of text held at a time
