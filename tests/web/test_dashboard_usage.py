"""The dashboard's usage panel (GPU-hours by day, tenant, user or job) and its GPU-utilisation chart, in a real
headless Chromium against a real platform (virtual 2x4 nodes, SQLite) after real attempts."""

from __future__ import annotations

import sys

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from tests.web.pages import open_dashboard, visible, wait_for
from tests.web.platform import Platform


def _usage_rows(driver: WebDriver) -> dict[str, list[str]]:
    rows = driver.find_elements(By.CSS_SELECTOR, "#usage tbody tr[data-key]")
    return {str(r.get_attribute("data-key")): [td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows}


def test_usage_table_and_utilisation_chart(platform: Platform, page: WebDriver) -> None:
    token = platform.add_tenant("acct", 8)
    job_id = platform.submit("acct", name="busy", learners=2, resources={"gpus": 2, "cpus": 0.5},
                             command=[sys.executable, "-c", "import time; time.sleep(2)"])
    done = platform.wait_status("acct", job_id, "COMPLETED", timeout_s=30)
    attempt = done["attempt_history"][0]
    hours = 4 * (attempt["ended_at"] - attempt["started_at"]) / 3600
    open_dashboard(page, platform.url, token)
    wait_for(page, lambda d: visible(d, "usage-panel"))
    Select(page.find_element(By.ID, "usage-window")).select_by_value("3600")
    # by day: one day and the total, each with the job's GPU-hours
    wait_for(page, lambda d: "total" in _usage_rows(d), 20, "the usage table never showed a total")
    rows = _usage_rows(page)
    assert rows["total"][1] == f"{hours:.2f}" and rows["total"][6] == "1"
    # by job: the job's row links to its detail
    Select(page.find_element(By.ID, "usage-by")).select_by_value("job")
    wait_for(page, lambda d: job_id in _usage_rows(d), 20, "the usage table never showed the job")
    assert _usage_rows(page)[job_id][0] == f"{job_id} busy"
    assert page.find_element(By.ID, "usage-key").get_attribute("textContent") == "Job"
    # by user: the submitting user, keyed tenant/user
    Select(page.find_element(By.ID, "usage-by")).select_by_value("user")
    wait_for(page, lambda d: "acct/default" in _usage_rows(d), 20, "the usage table never showed the user")
    assert _usage_rows(page)["acct/default"][1] == f"{hours:.2f}"
    assert page.find_element(By.ID, "usage-key").get_attribute("textContent") == "Tenant/user"
    # the chart: points over the hour, with 4 of the 8 GPUs busy at the peak step
    canvas = page.find_element(By.ID, "utilisation")
    wait_for(page, lambda d: int(canvas.get_attribute("data-points") or 0) > 0, 20, "the chart was never drawn")
    assert float(canvas.get_attribute("data-peak") or 0) > 0
    assert "of 8 GPUs" in page.find_element(By.ID, "utilisation-title").text
    drawn = page.execute_script(
        "const c = document.getElementById('utilisation');"
        "return c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some((v, i) => i % 4 === 3 && v);")
    assert drawn
