"""The HTML report: one self-contained file, its figures valid SVG, and it renders offline in Chromium."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from loadmaster.core.job import JobSpec
from loadmaster.core.workload import LoadReport, Workload
from loadmaster.traces import philly
from loadmaster.traces.analysis import Shares, analyze
from loadmaster.traces.history import History
from loadmaster.traces.report import duration, render
from tests.traces.analysis_fixtures import HAND_SHARES, HAND_TRACE, hand_cluster, write_log

SVG_NS = "http://www.w3.org/2000/svg"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _svgs(html: str) -> list[ET.Element]:
    out = []
    start = 0
    while (i := html.find("<svg", start)) >= 0:
        j = html.index("</svg>", i) + len("</svg>")
        out.append(ET.fromstring(html[i:j]))  # each figure must be well-formed XML
        start = j
    return out


@pytest.fixture
def hand_analysis(tmp_path: Path) -> dict[str, Any]:
    history = philly.load_history(write_log(tmp_path / "hand.json", HAND_TRACE))
    return analyze(history, hand_cluster(), lambda _c: Shares(HAND_SHARES, "by hand"))


def test_report_is_one_self_contained_file(hand_analysis: dict[str, Any]) -> None:
    html = render(hand_analysis)
    parser = _Tags()
    parser.feed(html)
    tags = {t for t, _ in parser.tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}
    for tag, attrs in parser.tags:
        for name, value in attrs.items():
            assert name not in ("src", "href") or (value or "").startswith("#"), (tag, name, value)
    assert "url(" not in html and "@import" not in html
    assert html.replace(SVG_NS, "").count("http") == 0
    svgs = _svgs(html)
    # sizes, status, 2 runtime, queueing by size, 4 VCs, split, locality, utilisation, runtime to failure
    assert len(svgs) == 13
    for svg in svgs:
        assert svg.tag == f"{{{SVG_NS}}}svg"
        assert svg.find(f"{{{SVG_NS}}}rect") is not None


def test_report_shows_the_numbers_and_says_what_is_missing(hand_analysis: dict[str, Any]) -> None:
    html = render(hand_analysis)
    assert "fair_share" in html and "locality" in html
    assert "Not available: per-GPU compute utilisation" in html
    assert "waited &gt;= 1.0 min" in html
    assert "the paper&#x27;s failure categories" in html
    assert "43.3 min" in html  # J7's 2,600 s wait, the 5-8 GPU median


def test_report_of_a_trace_without_times_marks_sections_unavailable() -> None:
    w = Workload([JobSpec("a", "t", 0, 1, 1, 60.0), JobSpec("b", "t", 5, 1, 2, 90.0)], LoadReport("mem"))
    html = render(analyze(History.untimed(w), None))
    assert html.count('class="na"') >= 4  # queueing, locality, utilisation (and per-GPU), failures
    assert "--replay" in html
    assert len(_svgs(html)) == 4  # sizes, status, the two runtime CDFs


@pytest.mark.parametrize(("seconds", "text"), [(5, "5 s"), (90, "1.5 min"), (7200, "2.0 h"), (172800, "2.0 d"),
                                               (None, "-")])
def test_durations_read_as_people_say_them(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def test_report_renders_offline_in_chromium(hand_analysis: dict[str, Any], tmp_path: Path) -> None:
    from tests.web.browser import chromium, missing_binaries

    if missing_binaries():
        pytest.skip("Chromium/ChromeDriver not installed")
    page = tmp_path / "report.html"
    page.write_text(render(hand_analysis))
    with chromium() as driver:
        driver.get(page.as_uri())
        drawn = driver.execute_script(
            "return Array.from(document.querySelectorAll('svg')).map(s => s.getBoundingClientRect().width)")
        fetched = driver.execute_script("return performance.getEntriesByType('resource').length")
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert len(drawn) == 13 and min(drawn) > 500
    assert fetched == 0  # nothing loaded from anywhere: the file is the whole report
    assert errors == []
