"""What the tests do with the dashboard in the browser: sign in, find rows, wait for what the page shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

# The page refreshes every second in the tests (the default is 3 s) so that waits stay short.
REFRESH_MS = 1000


def wait_for(driver: WebDriver, what: Callable[[WebDriver], Any], timeout_s: float = 20.0, message: str = "") -> Any:
    """Poll until `what` answers something truthy; stale elements (the page re-renders) count as not yet."""
    return WebDriverWait(driver, timeout_s, poll_frequency=0.1,
                         ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(
        what, message)


def open_dashboard(driver: WebDriver, url: str, token: str) -> None:
    """A fresh page with nothing remembered, then sign in with `token`. The storage is cleared on a page of the
    same origin where the dashboard does not run: on the dashboard itself, a sign-in still under way (the token
    the previous test left) would store its token again after the clear."""
    driver.get(f"{url}/health")
    driver.execute_script("sessionStorage.clear()")
    driver.get(f"{url}/ui/?refresh={REFRESH_MS}")
    field = wait_for(driver, lambda d: visible(d, "token"))
    field.send_keys(token)
    driver.find_element(By.ID, "login-submit").click()


def visible(driver: WebDriver, element_id: str) -> WebElement | None:
    el = driver.find_element(By.ID, element_id)
    return el if el.is_displayed() else None


def job_row(driver: WebDriver, job_id: str) -> WebElement | None:
    rows = driver.find_elements(By.CSS_SELECTOR, f'#jobs tbody tr[data-job="{job_id}"]')
    return rows[0] if rows else None


def row_status(driver: WebDriver, job_id: str) -> str | None:
    row = job_row(driver, job_id)
    return row.get_attribute("data-status") if row is not None else None


def wait_row_status(driver: WebDriver, job_id: str, status: str, timeout_s: float = 20.0) -> None:
    wait_for(driver, lambda d: row_status(d, job_id) == status, timeout_s,
             f"job {job_id} never showed {status} in the jobs table")


def page_errors(driver: WebDriver) -> list[str]:
    """JavaScript errors the page raised (failed requests the page handles, such as a 401, do not count)."""
    return [e["message"] for e in driver.get_log("browser")
            if e.get("level") == "SEVERE" and e.get("source") != "network"]


def click(driver: WebDriver, css: str, timeout_s: float = 10.0) -> None:
    """Click the element `css` selects; one redrawn by a refresh between finding and clicking is found again."""
    def attempt(d: WebDriver) -> bool:
        d.find_element(By.CSS_SELECTOR, css).click()
        return True

    wait_for(driver, attempt, timeout_s, f"nothing to click at {css}")


def row_css(job_id: str) -> str:
    return f'#jobs tbody tr[data-job="{job_id}"]'
