"""The dashboard in a real headless Chromium against a real platform (`loadmaster server` with the control loop
and the local executor on two virtual 4-GPU nodes, a SQLite file): what a tenant and the admin see and do."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.web.pages import (
    click,
    job_row,
    open_dashboard,
    row_css,
    visible,
    wait_for,
    wait_row_status,
)
from tests.web.platform import Platform

STATIC = Path(__file__).parents[2] / "src" / "loadmaster" / "web" / "static"

# Each learner prints a few lines naming its rank, then exits 0.
HELLO = [sys.executable, "-c",
         "import os\nfor i in range(3): print(f'hello from rank {os.environ[\"RANK\"]} line {i}', flush=True)"]


@pytest.fixture(scope="module")
def tenants(platform: Platform) -> Platform:
    platform.add_tenant("alpha", 8)
    platform.add_tenant("beta", 8)
    return platform



def test_bad_token_shows_a_readable_error(page: WebDriver, tenants: Platform) -> None:
    open_dashboard(page, tenants.url, "lm_not-a-token-the-server-knows")
    error = wait_for(page, lambda d: visible(d, "login-error"))
    assert "not accepted" in error.text and "401" in error.text
    assert not page.find_element(By.ID, "dashboard").is_displayed()
    assert page.execute_script("return sessionStorage.getItem('loadmaster.token')") is None


def test_submitted_job_appears_runs_to_completed_and_shows_its_logs(page: WebDriver, tenants: Platform) -> None:
    open_dashboard(page, tenants.url, tenants.tokens["alpha"])
    wait_for(page, lambda d: visible(d, "dashboard"))
    assert page.find_element(By.ID, "whoami").text == "tenant alpha"
    job_id = tenants.submit("alpha", name="hello", learners=2, resources={"gpus": 1}, command=HELLO)
    wait_for(page, lambda d: job_row(d, job_id), message=f"job {job_id} never appeared")
    wait_row_status(page, job_id, "COMPLETED", timeout_s=30)

    click(page, row_css(job_id) + " td:first-child")
    wait_for(page, lambda d: visible(d, "detail"))
    history = wait_for(page, lambda d: _history(d) if "COMPLETED" in _history(d) else None)
    assert history[0] == "QUEUED" and history[-1] == "COMPLETED" and "PROCESSING" in history
    attempt = page.find_element(By.CSS_SELECTOR, '#detail-attempts tbody tr[data-attempt="1"]').text
    assert "succeeded" in attempt and "rank 0: 0" in attempt and "rank 1: 0" in attempt
    log = wait_for(page, lambda d: (t := d.find_element(By.ID, "log").text) and "rank 1 line 2" in t and
                   "rank 0 line 2" in t and t, message="the log lines never showed")
    assert "[0] hello from rank 0 line 0" in log and "[1] hello from rank 1 line 0" in log

    # One rank alone.
    click(page, '#log-rank option[value="1"]')
    wait_for(page, lambda d: "rank 1 line 2" in d.find_element(By.ID, "log").text and
             "rank 0" not in d.find_element(By.ID, "log").text, message="rank 1's log alone never showed")
    page.find_element(By.ID, "detail-close").click()


def test_a_failed_attempt_shows_its_exit_code_and_failure_class(page: WebDriver, tenants: Platform) -> None:
    fail = "import sys; print('about to fail', flush=True); sys.exit(3)"
    job_id = tenants.submit("alpha", name="broken", learners=1, resources={"gpus": 1}, retry={"policy": "never"},
                            command=[sys.executable, "-c", fail])
    tenants.wait_status("alpha", job_id, "FAILED")
    open_dashboard(page, tenants.url, tenants.tokens["alpha"])
    wait_row_status(page, job_id, "FAILED")
    click(page, row_css(job_id) + " td:first-child")
    attempt = wait_for(page, lambda d: d.find_element(By.CSS_SELECTOR, '#detail-attempts tbody tr[data-attempt="1"]'))
    cells = [td.text for td in attempt.find_elements(By.TAG_NAME, "td")]
    failure_class = tenants.job("alpha", job_id)["attempt_history"][0]["failure_category"]
    assert cells[3] == "failed" and cells[4] == "rank 0: 3" and cells[5] == failure_class.replace("_", " ")
    wait_for(page, lambda d: "about to fail" in d.find_element(By.ID, "log").text)
    assert page.find_elements(By.CSS_SELECTOR, "#detail-actions button") == []  # nothing to do with a failed job
    page.find_element(By.ID, "detail-close").click()


def test_cancel_a_queued_job_with_its_button(page: WebDriver, tenants: Platform) -> None:
    open_dashboard(page, tenants.url, tenants.tokens["alpha"])
    # The blocker holds all 8 GPUs, so the second job waits in the queue.
    blocker = tenants.submit("alpha", name="blocker", learners=2, resources={"gpus": 4},
                             command=[sys.executable, "-c", "import time; time.sleep(60)"])
    waiting = tenants.submit("alpha", name="waiting", learners=1, resources={"gpus": 1}, command=HELLO)
    wait_row_status(page, blocker, "PROCESSING")
    wait_row_status(page, waiting, "QUEUED")
    wait_for(page, lambda d: d.find_elements(By.CSS_SELECTOR, f'#queue tbody tr[data-job="{waiting}"]'),
             message="the waiting job never showed in the queue")

    # Halt and resume it first: it leaves the queue and comes back.
    _click_action(page, waiting, "halt")
    wait_row_status(page, waiting, "HALTED", timeout_s=10)
    assert not page.find_elements(By.CSS_SELECTOR, f'#queue tbody tr[data-job="{waiting}"]')
    _click_action(page, waiting, "resume")
    wait_row_status(page, waiting, "QUEUED", timeout_s=10)

    _click_action(page, waiting, "cancel")
    wait_for(page, lambda d: d.switch_to.alert).accept()
    wait_row_status(page, waiting, "CANCELLED", timeout_s=10)
    assert tenants.job("alpha", waiting)["status"] == "CANCELLED"
    assert not page.find_elements(By.CSS_SELECTOR, f'#queue tbody tr[data-job="{waiting}"]')

    # The running blocker, from its detail view: the learners are stopped, then it is CANCELLED.
    click(page, row_css(blocker) + " td:first-child")
    click(page, '#detail-actions button[data-action="cancel"]')
    wait_for(page, lambda d: d.switch_to.alert).accept()
    wait_row_status(page, blocker, "CANCELLED", timeout_s=20)
    page.find_element(By.ID, "detail-close").click()


def test_a_tenant_never_sees_another_tenants_jobs(page: WebDriver, tenants: Platform) -> None:
    theirs = tenants.submit("beta", name="beta-secret-job", learners=1, resources={"gpus": 1}, command=HELLO)
    mine = tenants.submit("alpha", name="alpha-job", learners=1, resources={"gpus": 1}, command=HELLO)
    open_dashboard(page, tenants.url, tenants.tokens["alpha"])
    wait_for(page, lambda d: job_row(d, mine))
    for _ in range(2):  # across refreshes, not only the first render
        stamp = page.find_element(By.ID, "updated").text
        wait_for(page, lambda d, s=stamp: d.find_element(By.ID, "updated").text != s)
        assert theirs not in page.page_source and "beta-secret-job" not in page.page_source
    assert not page.find_element(By.ID, "tenants-panel").is_displayed()

    # Asking for it by id answers 404 like a job that does not exist.
    page.get(f"{tenants.url}/ui/#job={theirs}")
    error = wait_for(page, lambda d: visible(d, "detail-error"))
    assert "404" in error.text
    assert "beta-secret-job" not in page.page_source
    page.find_element(By.ID, "detail-close").click()


def test_admin_sees_every_tenant_with_quota_and_usage(page: WebDriver, tenants: Platform) -> None:
    open_dashboard(page, tenants.url, tenants.admin)
    wait_for(page, lambda d: visible(d, "tenants-panel"))
    assert page.find_element(By.ID, "whoami").text == "admin"
    rows = wait_for(page, lambda d: {r.get_attribute("data-tenant"): r.text
                                     for r in d.find_elements(By.CSS_SELECTOR, "#tenants tbody tr[data-tenant]")})
    assert set(rows) >= {"alpha", "beta"}
    assert rows["alpha"].split()[:3] == ["alpha", "8", "0"]  # name, GPU quota, borrowing limit
    # The jobs and cluster panels load on their own requests: wait for them rather than read them at once.
    tenants_of_jobs = wait_for(page, lambda d: {r.find_elements(By.TAG_NAME, "td")[3].text
                                                for r in d.find_elements(By.CSS_SELECTOR, "#jobs tbody tr[data-job]")})
    assert tenants_of_jobs == {"alpha", "beta"}
    nodes = wait_for(page, lambda d: d.find_elements(By.CSS_SELECTOR, "#cluster .node"))
    assert [n.get_attribute("data-node") for n in nodes] and all(
        len(n.find_elements(By.CSS_SELECTOR, ".gpu")) == 4 for n in nodes)


def test_logging_out_forgets_the_token(page: WebDriver, tenants: Platform) -> None:
    open_dashboard(page, tenants.url, tenants.tokens["alpha"])
    wait_for(page, lambda d: visible(d, "dashboard"))
    page.find_element(By.ID, "logout").click()
    wait_for(page, lambda d: visible(d, "login"))
    assert page.execute_script("return sessionStorage.getItem('loadmaster.token')") is None


def test_the_dashboard_is_served_self_contained(tenants: Platform) -> None:
    root = httpx.get(tenants.url + "/", follow_redirects=False)
    assert root.status_code in (302, 307) and root.headers["location"].endswith("/ui/")
    index = httpx.get(tenants.url + "/ui/")
    assert index.status_code == 200 and "<title>loadmaster</title>" in index.text
    csp = index.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "connect-src 'self'" in csp
    # Nothing is fetched from anywhere but the server itself: no absolute URL in any static file.
    for path in STATIC.iterdir():
        assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", path.read_text()), path.name


def _click_action(driver: WebDriver, job_id: str, verb: str) -> None:
    click(driver, f'{row_css(job_id)} button[data-action="{verb}"]')


def _history(driver: WebDriver) -> list[str]:
    rows = driver.find_elements(By.CSS_SELECTOR, "#detail-history tbody tr:not(.empty)")
    return [r.find_elements(By.TAG_NAME, "td")[2].text for r in rows]
