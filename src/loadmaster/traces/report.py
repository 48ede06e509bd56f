"""The self-contained HTML report of `trace analyze --html`: the analysis' numbers as figures and tables.

One file, inline SVG, no script and no external resource, so it opens offline and can be attached to an
issue. It draws only what traces/analysis.py computed (the same dict `--json` prints).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from loadmaster.traces.stats import SIZE_BUCKETS
from loadmaster.traces.svg import PALETTE, Axis, bar_chart, line_chart, scatter_chart

MINUTE = 60.0
MAX_SCATTER = 4000  # points drawn in the locality figure
# One colour per job-size bucket and per delay class in every chart ("2-4 GPU" is blue wherever it is).
_BUCKET_COLOURS = dict(zip([f"{b} GPU" for b in SIZE_BUCKETS], ("#999999", *PALETTE[2:3], *PALETTE[:2], PALETTE[3]),
                           strict=True))
_STATUS_COLOURS = {"Pass": PALETTE[2], "Failed": PALETTE[1], "Killed": PALETTE[4]}
_CLASS_COLOURS = {"fair_share": PALETTE[0], "fragmentation": PALETTE[1], "locality": PALETTE[3],
                  "capacity": PALETTE[2], "unexplained": "#bbbbbb"}
_CSS = """
body{font-family:sans-serif;max-width:1180px;margin:24px auto;padding:0 16px;color:#222;line-height:1.45}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
.figs{display:flex;flex-wrap:wrap;gap:12px}.na{color:#8a4b00;background:#fff5e6;padding:6px 10px}
.note{color:#555;font-size:13px}code{background:#f3f3f3;padding:0 3px}
table.kv td{text-align:left}
"""


def render(a: Mapping[str, Any]) -> str:
    sections = [
        ("sizes", "Job sizes", _sizes(a)),
        ("status", "Final status", _status(a)),
        ("runtime", "Runtime", _runtime(a["runtime"])),
        ("queueing", "Queueing delay", _queueing(a["queueing"])),
        ("locality", "Locality and waiting", _locality(a["locality"])),
        ("utilization", "GPU utilisation", _utilization(a["utilization"])),
        ("failures", "Failures", _failures(a["failures"])),
        ("retries", "Retries", _retries(a["retries"])),
        ("inferred", "What is inferred, and checks", _inferred(a)),
    ]
    nav = " · ".join(f'<a href="#{k}">{escape(title)}</a>' for k, title, _ in sections)
    body = "\n".join(f'<section id="{k}"><h2>{escape(title)}</h2>\n{html}</section>' for k, title, html in sections)
    source = escape(str(a["source"]))
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Trace analysis: {source}</title>'
            f"<style>{_CSS}</style></head><body>\n<h1>Trace analysis: {source}</h1>\n{_overview(a)}\n"
            f"<p>{nav}</p>\n{body}\n<p class=\"note\">Made by <code>loadmaster trace analyze --html</code>; "
            "<code>--json</code> prints every number shown here.</p>\n</body></html>\n")


# ------------------------------------------------------------------------------------------ helpers


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _pairs(rows: Sequence[Sequence[object]]) -> str:
    """A two-column table of names and values."""
    body = "".join(f"<tr><td>{escape(str(k))}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _na(section: Mapping[str, Any]) -> str:
    return f'<p class="na">Not available: {escape(str(section.get("why", "")))}</p>'


def _figs(*svgs: str) -> str:
    return '<div class="figs">' + "".join(svgs) + "</div>"


def _cdf_chart(title: str, cdfs: Mapping[str, Mapping[str, Any]], colours: Mapping[str, str] | None = None) -> str:
    """CDFs of durations in seconds, drawn in minutes on a log axis (as the paper draws them)."""
    shown = {k: c for k, c in cdfs.items() if c.get("n")}
    curves = {f"{k} (n={c['n']})": [(v / MINUTE, f) for v, f in c["curve"]] for k, c in shown.items()}
    hi = max((v for curve in curves.values() for v, _ in curve), default=10.0)
    palette = None if colours is None else [colours.get(k, "#000000") for k in shown]
    return line_chart(title, curves, Axis(0.1, max(hi, 1.0), "minutes (log)", log=True),
                      Axis(0, 1, "CDF", percent=True), step=True, colours=palette)


def _by_size(cdfs: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {f"{b} GPU": c for b, c in cdfs.items()}


def _cdf_rows(cdfs: Mapping[str, Mapping[str, Any]]) -> list[list[object]]:
    return [[k, c["n"], duration(c.get("p50")), duration(c.get("p90")), duration(c.get("p99")),
             duration(c.get("mean"))] for k, c in cdfs.items() if c.get("n")]


_CDF_HEAD = ("", "jobs", "median", "p90", "p99", "mean")


# ------------------------------------------------------------------------------------------ sections


def _overview(a: Mapping[str, Any]) -> str:
    cluster = a.get("cluster")
    rows = [
        ["jobs", f"{a['jobs']:,}"],
        ["virtual clusters (tenants) / users", f"{a['tenants']} / {a['users']}"],
        ["submissions span", duration(a["span_s"])],
        ["start times", f"{a['times']}: {a['times_how']}"],
        ["cluster", "none given" if cluster is None else
         f"{cluster['name']}: {cluster['servers']} servers, {cluster['gpus']:,} GPUs listed"],
        ["capacity used for the analysis", "-" if a.get("capacity_gpus") is None else f"{a['capacity_gpus']:,} GPUs"],
    ]
    return _pairs(rows)


def _sizes(a: Mapping[str, Any]) -> str:
    s = a["job_sizes"]
    fig = bar_chart("Jobs and GPU time by job size", [f"{b} GPU" for b in s["buckets"]],
                    {"jobs": s["jobs_share"], "GPU time": s["gpu_time_share"]}, Axis(0, 1, "share", percent=True))
    exact = _table(("GPUs", *s["by_gpus"]), [["jobs", *s["by_gpus"].values()]])
    rows = [[f"{b} GPU", n, _pct(j), _pct(g)]
            for b, n, j, g in zip(s["buckets"], s["jobs"], s["jobs_share"], s["gpu_time_share"], strict=True)]
    return _figs(fig) + _table(("size", "jobs", "share of jobs", "share of GPU time"), rows) + exact


def _status(a: Mapping[str, Any]) -> str:
    s = a["status_mix"]
    fig = bar_chart("Jobs and GPU time by final status", s["statuses"],
                    {"jobs": s["jobs_share"], "GPU time": s["gpu_time_share"]}, Axis(0, 1, "share", percent=True))
    rows = [[k, n, _pct(j), f"{h:,.0f}", _pct(g)] for k, n, j, h, g in
            zip(s["statuses"], s["jobs"], s["jobs_share"], s["gpu_hours"], s["gpu_time_share"], strict=True)]
    return (_figs(fig) + _table(("status", "jobs", "share of jobs", "GPU-hours", "share of GPU time"), rows)
            + '<p class="note">GPU time counts every attempt of a job, failed ones included.</p>')


def _runtime(r: Mapping[str, Any]) -> str:
    figs = _figs(_cdf_chart("Runtime by final status", r["by_status"], _STATUS_COLOURS),
                 _cdf_chart("Runtime by job size", _by_size(r["by_size"]), _BUCKET_COLOURS))
    return (figs + f'<p class="note">Runtime: {escape(r["definition"])}.</p>'
            + _table(("final status", *_CDF_HEAD[1:]), _cdf_rows(r["by_status"]))
            + _table(("size", *_CDF_HEAD[1:]), _cdf_rows(_by_size(r["by_size"]))))


def _queueing(q: Mapping[str, Any]) -> str:
    if not q.get("available"):
        return _na(q)
    parts = [
        _figs(_cdf_chart("Queueing delay by job size", _by_size(q["by_size"]), _BUCKET_COLOURS)),
        f'<p class="note">Queueing delay: {escape(q["definition"])}.</p>',
        _table(("size", *_CDF_HEAD[1:]), [*_cdf_rows(_by_size(q["by_size"])),
                                          *_cdf_rows({"all": q["overall"]})]),
        "<h3>The largest virtual clusters</h3>",
        _figs(*(_cdf_chart(f"VC {vc}", _by_size(by), _BUCKET_COLOURS) for vc, by in q["by_vc"].items())),
        "<h3>Fair-share and fragmentation delay</h3>",
        _split(q["split"]),
    ]
    return "\n".join(parts)


def _split(s: Mapping[str, Any]) -> str:
    if not s.get("available"):
        return _na(s)
    classes = s["classes"]
    buckets = list(s["by_size"])
    fig = bar_chart("Share of waiting time by cause", [f"{b} GPU" for b in buckets],
                    {c: [s["by_size"][b]["share_by_class"][c] for b in buckets] for c in classes},
                    Axis(0, 1, "share of waiting seconds", percent=True), stacked=True,
                    colours=[_CLASS_COLOURS.get(c, "#000000") for c in classes])
    rows = []
    for label, t in [*((f"{b} GPU", s["by_size"][b]) for b in buckets), ("all", s["overall"])]:
        rows.append([label, t["jobs"], t["jobs_delayed"],
                     *(f"{t['delayed_jobs_by_dominant_class'][c]} ({_pct(t['share_by_class'][c])})" for c in classes)])
    parts = [_figs(fig),
             _table(("size", "jobs", f"waited >= {duration(s['min_delay_s'])}", *classes), rows),
             '<p class="note">Each cell: delayed jobs whose wait was mostly that cause (share of all waiting '
             f"seconds of the row in brackets). Method: {escape(s['method'])}.</p>"]
    if s.get("caveat"):
        parts.append(f'<p class="na">{escape(s["caveat"])}</p>')
    inputs = s.get("inputs")
    if inputs:
        shares = ", ".join(f"{vc} {g:g}" for vc, g in inputs["shares_gpus"].items())
        parts.append(f'<p class="note">Capacity {inputs["capacity_gpus"]:,} GPUs, of which the trace\'s jobs hold '
                     f'{_pct(inputs["allocated_share"])} on average. VC shares (GPUs): {escape(shares)} '
                     f'({escape(inputs["share_rule"])}).</p>')
    return "\n".join(parts)


def _locality(loc: Mapping[str, Any]) -> str:
    if not loc.get("available"):
        return _na(loc)
    series: dict[str, list[tuple[float, float]]] = {"5-8 GPU": [], ">8 GPU": []}
    points = loc["points"]
    every = max(1, math.ceil(len(points) / MAX_SCATTER))  # a readable, light figure: --json has every point
    for delay, servers, gpus in points[::every]:
        series["5-8 GPU" if gpus <= 8 else ">8 GPU"].append((delay / MINUTE, servers))
    hi_x = max((p[0] for ps in series.values() for p in ps), default=10.0)
    hi_y = max((p[1] for ps in series.values() for p in ps), default=1.0)
    fig = scatter_chart("Servers a job ran on vs its queueing delay", series,
                        Axis(0.1, max(hi_x, 1.0), "queueing delay, minutes (log)", log=True),
                        Axis(0, hi_y + 1, "servers"), colours=[_BUCKET_COLOURS[k] for k in series])
    rows = [[n, loc["jobs_by_servers"][n], duration(d)] for n, d in loc["median_delay_s_by_servers"].items()]
    drawn = "" if every == 1 else f" The figure draws every {every}th of the {len(points):,} jobs."
    return (_figs(fig) + f'<p class="note">{escape(loc["definition"])}.{drawn}</p>'
            + _table(("servers", "jobs", "median queueing delay"), rows))


def _utilization(u: Mapping[str, Any]) -> str:
    parts = []
    if u.get("available"):
        series = u["series"]
        points = [(t / 86400.0, v) for t, v in zip(series["t_s"], series["allocated"], strict=True)]
        hi = max((p[0] for p in points), default=1.0)
        parts.append(_figs(line_chart(f"GPUs allocated ({duration(series['bin_s'])} averages)", {"allocated": points},
                                      Axis(0, max(hi, 1.0), "days since the first submission"),
                                      Axis(0, max(1.0, max((p[1] for p in points), default=0.0)), "share of GPUs",
                                           percent=True))))
        parts.append(_pairs([
            ["capacity", f"{u['capacity_gpus']:,} GPUs"],
            ["allocated, mean over the trace", _pct(u["allocated_mean"])],
            ["allocated, median / peak of the bins", f"{_pct(u['allocated_p50'])} / {_pct(u['allocated_max'])}"],
            ["offered load (GPU-time asked / GPU-time between first and last submission)", _pct(u.get("offered_load"))],
        ]))
        parts.append(f'<p class="note">{escape(u["definition"])}.</p>')
    else:
        parts.append(_na(u))
        if u.get("offered_load") is not None:
            parts.append(f"<p>Offered load (GPU-time asked / GPU-time between first and last submission): "
                         f"{_pct(u['offered_load'])}.</p>")
    parts.append(_per_gpu(u["per_gpu_compute"]))
    return "\n".join(parts)


def _per_gpu(g: Mapping[str, Any]) -> str:
    """The paper's figures 5-6 and table 3: GPU utilisation CDFs by size, per final status."""
    if not g.get("available"):
        return _na(g)
    figs = []
    for status, by_size in g["by_status"].items():
        shown = {f"{b} GPU (n={c['n']:,})": [(v, f) for v, f in c["curve"]] for b, c in by_size.items() if c.get("n")}
        figs.append(line_chart(f"GPU utilisation, {status} jobs", shown, Axis(0, 100, "utilisation (%)"),
                               Axis(0, 1, "CDF of GPU-minutes", percent=True), step=True,
                               colours=[_BUCKET_COLOURS[f"{b} GPU"] for b, c in by_size.items() if c.get("n")]))
    rows = [[f"{n} GPU", f"{m:.1f}%"] for n, m in g["mean_by_gpus"].items()]
    return (_figs(*figs) + _table(("job size", "mean GPU utilisation"), rows)
            + f'<p class="note">{escape(g["definition"])}; {g["gpu_minutes"]:,} GPU-minutes from {g["log_rows"]:,} '
              f"rows of {escape(g['source'])}.</p>")


def _failures(f: Mapping[str, Any]) -> str:
    if not f.get("available"):
        return _na(f)
    rows = [[r["label"], r["trials"], r["jobs"], r["users"], duration(r["rtf_s"]["p50"]), duration(r["rtf_s"]["p90"]),
             duration(r["rtf_s"]["p95"]), " / ".join(_pct(v) for v in r["failed_within"].values()),
             ", ".join(f"{b}: {_pct(v)}" for b, v in r["gpu_demand_share"].items()),
             f"{r['gpu_hours']:,.0f}", _pct(r["gpu_time_share"])] for r in f["rows"]]
    table = _table(("outcome", "trials", "jobs", "users", "RTF p50", "RTF p90", "RTF p95",
                    "within 1 min / 10 min / 1 h", "GPU demand (share of trials)", "GPU-hours",
                    "share of all GPU time"), rows)
    fig = _cdf_chart("Runtime to failure", {r["outcome"]: r["rtf_cdf"] for r in f["rows"]})
    return (table + '<p class="note">A trial is one attempt that did not pass; RTF is its runtime to failure.</p>'
            + _na(f["category"]) + _figs(fig))


def _retries(r: Mapping[str, Any]) -> str:
    statuses = list(r["attempts_by_status"])
    counts = sorted({int(n) for v in r["attempts_by_status"].values() for n in v})
    rows = [[s, *(r["attempts_by_status"][s].get(str(n), 0) for n in counts)] for s in statuses]
    parts = [
        _table(("final status", *(f"{n} attempt{'s' if n > 1 else ''}" for n in counts)), rows),
        _pairs([
            ["jobs retried (more than one attempt)", f"{r['jobs_retried']:,} ({_pct(r['jobs_retried_share'])})"],
            ["of which passed in the end", f"{r['retried_then_passed']:,}"],
            ["failed attempts", f"{r['failed_attempts']:,}"],
            ["GPU-hours of failed attempts", f"{r['gpu_hours_failed_attempts']:,.0f} "
                                             f"({_pct(r['gpu_time_share_failed_attempts'])} of all GPU time)"],
        ]),
    ]
    gap = r["retry_gap"]
    if gap.get("n"):
        parts.append(f"<p>Gap between an attempt's end and the next attempt's start: median {duration(gap['p50'])}, "
                     f"p90 {duration(gap['p90'])} ({gap['n']} retries).</p>")
    else:
        parts.append(_na(gap) if "why" in gap else "")
    return "\n".join(parts)


def _inferred(a: Mapping[str, Any]) -> str:
    notes = a.get("notes") or []
    items = "".join(f"<li>{escape(n)}</li>" for n in notes) or "<li>nothing: the trace gave every input</li>"
    checks = a.get("checks") or {}
    check_rows = [[k.replace("_", " "), v] for k, v in checks.items()]
    return f"<ul>{items}</ul>" + (_table(("consistency check", "count"), check_rows) if check_rows else "")
