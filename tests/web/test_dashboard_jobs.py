"""The dashboard's submit form, its filters and pages over 10,000 jobs, a job's metric charts and result downloads,
and the API docs at /docs, in a real headless Chromium against a real platform (virtual 2x4 nodes, SQLite)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from loadmaster.core.job import JobStatus
from loadmaster.platform.manifest import parse_manifest
from loadmaster.platform.store.db import Store
from loadmaster.platform.store.jobs import add_job, transition
from loadmaster.platform.store.models import Tenant
from tests.web.pages import REFRESH_MS, click, job_row, open_dashboard, row_css, visible, wait_for
from tests.web.platform import Platform, running_platform

BULK = 10_000
PAGE = 50
NAMES = ("resnet", "bert-base", "gpt-small", "vit")


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Platform, Path]]:
    """This module's own platform, and the SQLite file behind it (the bulk jobs are written there directly)."""
    root: Path = tmp_path_factory.mktemp("jobs-ui")
    with running_platform(root) as p:
        p.add_tenant("gamma", 8)
        p.add_tenant("bulk", 1)
        yield p, root / "loadmaster.db"



def _fill_bulk(db: Path) -> list[tuple[float, str, str, str]]:
    """10,000 finished jobs of tenant `bulk`, written to the store as the API would (much faster); (submitted_at,
    id, name, status) of each, newest first."""
    store = Store.open(f"sqlite:///{db}")
    out = []
    try:
        for batch in range(0, BULK, 500):  # short transactions: the running server writes to this file too
            with store.session(for_update=True) as s:  # the write lock up front (BEGIN IMMEDIATE)
                tenant = s.query(Tenant).filter_by(name="bulk").one()
                for i in range(batch, batch + 500):
                    name = NAMES[i % len(NAMES)]
                    at = 1_700_000_000.0 + i
                    job = add_job(s, tenant.id, parse_manifest({"name": name, "command": "true"}), at)
                    status = JobStatus.CANCELLED if i % 5 == 0 else JobStatus.FAILED
                    transition(s, job, status, at + 1, "bulk")
                    out.append((at, job.id, name, status.value))
    finally:
        store.close()
    return sorted(out, reverse=True)


def _shown(driver: WebDriver) -> list[str]:
    return [r.get_attribute("data-job") for r in driver.find_elements(By.CSS_SELECTOR, "#jobs tbody tr[data-job]")]


def _wait_shown(driver: WebDriver, expected: list[str], what: str) -> None:
    wait_for(driver, lambda d: _shown(d) == expected, 20, f"the jobs table never showed {what}")


# ---------------------------------------------------------------------------------------------------- submit


def _open_form(page: WebDriver, url: str, token: str) -> WebElement:
    """Sign in, unfold the submit form; its emptied manifest editor."""
    open_dashboard(page, url, token)
    wait_for(page, lambda d: visible(d, "dashboard"))
    page.find_element(By.CSS_SELECTOR, "#submit-details summary").click()
    editor: WebElement = wait_for(page, lambda d: visible(d, "manifest"))
    editor.clear()
    return editor


def test_submit_form_names_each_bad_field_then_submits(page: WebDriver, platform: tuple[Platform, Path]) -> None:
    p, _ = platform
    editor = _open_form(page, p.url, p.tokens["gamma"])
    editor.send_keys("name: bad job\nresources: {gpus: -1}\ncommand: 'true'\nwrokdir: /tmp\n")
    page.find_element(By.ID, "submit-button").click()
    problems = wait_for(page, lambda d: {li.get_attribute("data-field"): li.text for li in
                                         d.find_elements(By.CSS_SELECTOR, "#submit-problems li")} or None)
    assert set(problems) == {"name", "resources.gpus", "wrokdir"}, problems
    assert "greater than or equal to 0" in problems["resources.gpus"]
    assert "unknown field" in problems["wrokdir"] and "letters, digits" in problems["name"]
    assert visible(page, "submit-error") is not None

    code = "print('submitted from the form', flush=True)"
    editor.clear()
    editor.send_keys(f"name: from-the-form\nresources: {{gpus: 1}}\ncommand: [{sys.executable!r}, -c, {code!r}]\n")
    page.find_element(By.ID, "submit-button").click()
    link = wait_for(page, lambda d: d.find_element(By.CSS_SELECTOR, "#submit-result a[data-job]"))
    job_id = link.get_attribute("data-job")
    assert not page.find_element(By.ID, "submit-problems").is_displayed()
    assert not page.find_element(By.ID, "submit-error").is_displayed()
    wait_for(page, lambda d: job_row(d, job_id), message="the submitted job never appeared")
    assert p.wait_status("gamma", job_id, "COMPLETED", timeout_s=30)["name"] == "from-the-form"


def test_the_admin_submits_for_a_tenant(page: WebDriver, platform: tuple[Platform, Path]) -> None:
    p, _ = platform
    editor = _open_form(page, p.url, p.admin)
    editor.send_keys("name: admins\nresources: {gpus: 0}\ncommand: 'true'\n")
    page.find_element(By.ID, "submit-button").click()
    problem = wait_for(page, lambda d: d.find_element(By.CSS_SELECTOR, '#submit-problems li[data-field="tenant"]'))
    assert "on behalf of a tenant" in problem.text
    page.find_element(By.ID, "submit-tenant").send_keys("gamma")
    page.find_element(By.ID, "submit-button").click()
    job_id = wait_for(page, lambda d: d.find_element(By.CSS_SELECTOR, "#submit-result a[data-job]")).get_attribute(
        "data-job")
    assert p.job("gamma", job_id)["tenant"] == "gamma"


# -------------------------------------------------------------------------------------------- filters, pages


def test_filters_and_pages_over_ten_thousand_jobs(page: WebDriver, platform: tuple[Platform, Path]) -> None:
    p, db = platform
    jobs = _fill_bulk(db)
    open_dashboard(page, p.url, p.tokens["bulk"])
    ids = [j[1] for j in jobs]
    _wait_shown(page, ids[:PAGE], "the newest page")
    assert page.find_element(By.ID, "page-newer").get_attribute("disabled") is not None
    for n in range(1, 4):  # older, older, older
        click(page, "#page-older")
        _wait_shown(page, ids[n * PAGE:(n + 1) * PAGE], f"page {n + 1}")
        assert page.find_element(By.ID, "page-info").text == f"page {n + 1}"
    click(page, "#page-newer")
    _wait_shown(page, ids[2 * PAGE:3 * PAGE], "page 3 again")
    # a refresh keeps the page (the keyset, not an offset, so it does not drift)
    stamp = page.find_element(By.ID, "updated").text
    wait_for(page, lambda d: d.find_element(By.ID, "updated").text != stamp, 10)
    assert _shown(page) == ids[2 * PAGE:3 * PAGE]

    # Filters start again at the newest page of what they select.
    Select(page.find_element(By.ID, "filter-status")).select_by_visible_text("CANCELLED")
    cancelled = [j[1] for j in jobs if j[3] == "CANCELLED"]
    _wait_shown(page, cancelled[:PAGE], "the newest cancelled jobs")
    page.find_element(By.ID, "filter-name").send_keys("BERT")
    both = [j[1] for j in jobs if j[3] == "CANCELLED" and j[2] == "bert-base"]
    _wait_shown(page, both[:PAGE], "cancelled bert jobs")
    click(page, "#page-older")
    _wait_shown(page, both[PAGE:2 * PAGE], "the next page of cancelled bert jobs")
    page.find_element(By.ID, "filter-name").send_keys("-nothing-like-it")
    wait_for(page, lambda d: "No job matches" in d.find_element(By.ID, "jobs").text, 10)
    assert page.find_element(By.ID, "page-older").get_attribute("disabled") is not None


# ------------------------------------------------------------------------------------------ metrics, results

REPORTER = """
import json, os, time
from loadmaster import runtime
for step in range(1, 21):
    runtime.report(step=step, total_steps=20, loss=round(2.0 / step, 4), samples_per_s=100 + step)
    time.sleep(0.02)
with open(os.path.join(runtime.results_dir(), "metrics.json"), "w") as f:
    json.dump({"final_loss": 0.1}, f)
os.makedirs(os.path.join(runtime.results_dir(), "plots"), exist_ok=True)
with open(os.path.join(runtime.results_dir(), "plots", "curve.csv"), "w") as f:
    f.write("step,loss\\n1,2.0\\n")
"""


def test_a_jobs_metrics_are_charted_and_its_results_download(page: WebDriver, platform: tuple[Platform, Path],
                                                            tmp_path: Path) -> None:
    p, _ = platform
    job_id = p.submit("gamma", name="reporter", resources={"gpus": 1}, command=[sys.executable, "-c", REPORTER])
    p.wait_status("gamma", job_id, "COMPLETED", timeout_s=30)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    page.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    open_dashboard(page, p.url, p.tokens["gamma"])
    click(page, row_css(job_id) + " td:first-child")
    charts = wait_for(page, lambda d: {c.get_attribute("data-metric"): int(c.get_attribute("data-points"))
                                       for c in d.find_elements(By.CSS_SELECTOR, "#metrics canvas")} or None)
    assert charts == {"loss": 20, "samples_per_s": 20}
    assert "last 0.1" in page.find_element(By.ID, "metrics").text  # loss 2/20
    drawn = page.execute_script("const c = document.querySelector('#metrics canvas[data-metric=loss]');"
                                "return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)"
                                ".some((v, i) => i % 4 === 3 && v > 0);")
    assert drawn  # something was painted

    files = wait_for(page, lambda d: [li.get_attribute("data-path") for li in d.find_elements(By.CSS_SELECTOR,
                                                                                               "#results li")] or None)
    assert files == ["metrics.json", "plots/curve.csv"]
    click(page, '#results li[data-path="plots/curve.csv"] button')
    wait_for(page, lambda d: d.find_element(By.CSS_SELECTOR, '#results li[data-path="plots/curve.csv"]')
             .get_attribute("data-downloaded") == "true", 10)
    wait_for(page, lambda d: (downloads / "curve.csv").exists(), 10, "the file never reached the downloads folder")
    assert (downloads / "curve.csv").read_text() == "step,loss\n1,2.0\n"
    assert job_id in page.current_url  # the token never went into a URL: the page is still the job's
    page.find_element(By.ID, "detail-close").click()


def test_charts_grow_while_a_job_reports(page: WebDriver, platform: tuple[Platform, Path]) -> None:
    p, _ = platform
    slow = REPORTER.replace("time.sleep(0.02)", "time.sleep(0.3)")
    job_id = p.submit("gamma", name="slow-reporter", resources={"gpus": 1}, command=[sys.executable, "-c", slow])
    open_dashboard(page, p.url, p.tokens["gamma"])
    click(page, row_css(job_id) + " td:first-child")

    def points(d: WebDriver) -> int:  # read in the page: the charts are redrawn as reports arrive
        return int(d.execute_script("const c = document.querySelector('#metrics canvas[data-metric=loss]');"
                                    "return c ? Number(c.dataset.points) : 0;"))

    seen = {wait_for(page, lambda d: points(d) or None, 30)}
    deadline = time.monotonic() + 30
    while points(page) < 20 and time.monotonic() < deadline:
        seen.add(points(page))
        time.sleep(REFRESH_MS / 4000)
    assert points(page) == 20 and len(seen) >= 2, seen  # it grew refresh after refresh
    page.find_element(By.ID, "detail-close").click()


# ---------------------------------------------------------------------------------------------------- /docs


def test_api_docs_render_from_the_server_alone(page: WebDriver, platform: tuple[Platform, Path]) -> None:
    p, _ = platform
    page.get(f"{p.url}/docs")
    operations = wait_for(page, lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock") or None, 30,
                          "Swagger UI never rendered the operations")
    assert len(operations) > 10
    assert "/api/v1/jobs/{job_id}/reports" in page.page_source
    sources = page.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert sources and all(s.startswith(p.url) for s in sources), sources
