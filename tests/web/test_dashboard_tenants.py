"""The admin's tenant controls in the dashboard: create, edit (quota, borrowing, roots) and delete a tenant, and
issue, rotate and revoke its users' tokens, in a real headless Chromium against a real platform (virtual 2x4
nodes, SQLite). Every token the page shows is tried against the real API; every refusal must reach the page."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.web.pages import click, open_dashboard, visible, wait_for
from tests.web.platform import Platform

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]



def _whoami(url: str, token: str) -> httpx.Response:
    return httpx.get(f"{url}/api/v1/whoami", headers={"Authorization": f"Bearer {token}"}, timeout=10)


def _tenant_cells(driver: WebDriver, name: str) -> list[str] | None:
    # The page redraws the table on its refresh timer: a row found just before a redraw is gone when its cells
    # are read (StaleElementReferenceException), so read it again from the redrawn table.
    for _ in range(5):
        rows = driver.find_elements(By.CSS_SELECTOR, f'#tenants tbody tr[data-tenant="{name}"]')
        try:
            return [td.text for td in rows[0].find_elements(By.TAG_NAME, "td")] if rows else None
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"the row of tenant {name} was redrawn at each of five reads")


def _users(driver: WebDriver) -> list[str]:
    return [str(r.get_attribute("data-user")) for r in driver.find_elements(By.CSS_SELECTOR,
                                                                              "#tenant-users tbody tr[data-user]")]


def _type(driver: WebDriver, element_id: str, text: str) -> None:
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(text)


def _error(driver: WebDriver, *words: str) -> str:
    """The tenants panel's error, once it says all of `words`."""
    def said(d: WebDriver) -> str | None:
        box = d.find_element(By.ID, "tenants-error")
        return box.text if box.is_displayed() and all(w in box.text for w in words) else None

    return str(wait_for(driver, said, 20, f"the tenants panel never showed an error with {words}"))


def _new_token(driver: WebDriver, previous: str = "") -> tuple[str, str]:
    """(title, token) of the new-token box once it shows a token other than `previous`."""
    def shown(d: WebDriver) -> tuple[str, str] | None:
        value = d.find_element(By.ID, "new-token-value").get_attribute("value") or ""
        if not visible(d, "new-token") or not value or value == previous:
            return None
        return d.find_element(By.ID, "new-token-title").text, value

    out: tuple[str, str] = wait_for(driver, shown, 20, "no new token was shown")
    return out


def _accept(driver: WebDriver) -> None:
    wait_for(driver, lambda d: d.switch_to.alert).accept()


def _open_admin(page: WebDriver, platform: Platform) -> None:
    open_dashboard(page, platform.url, platform.admin)
    wait_for(page, lambda d: visible(d, "tenants-panel"))


def _manage(page: WebDriver, name: str) -> None:
    click(page, f'#tenants tbody tr[data-tenant="{name}"] button[data-action="manage"]')
    wait_for(page, lambda d: visible(d, "tenant-manage"))
    wait_for(page, lambda d: d.find_element(By.ID, "manage-name").text == name)


def test_create_edit_and_delete_a_tenant(page: WebDriver, platform: Platform, tmp_path: Path) -> None:
    _open_admin(page, platform)
    click(page, "#tenant-create-details summary")
    _type(page, "create-name", "gamma")
    _type(page, "create-gpus", "3")
    _type(page, "create-borrow", "1")
    _type(page, "create-user", "alice")
    click(page, "#create-button")
    # The first user's token, shown once, and it works.
    title, token = _new_token(page)
    assert "gamma" in title and "alice" in title
    me = _whoami(platform.url, token).json()
    assert me["tenant"] == "gamma" and me["user"] == "alice"
    wait_for(page, lambda d: (_tenant_cells(d, "gamma") or [])[:3] == ["gamma", "3", "1"], 20,
             "the new tenant never appeared with its quota")
    click(page, "#new-token-copy")  # to the clipboard, or selected for Ctrl+C where the browser refuses
    wait_for(page, lambda d: d.find_element(By.ID, "new-token-copy").text in ("Copied", "Selected: press Ctrl+C"))
    click(page, "#new-token-dismiss")
    assert not page.find_element(By.ID, "new-token").is_displayed()
    assert page.find_element(By.ID, "new-token-value").get_attribute("value") == ""

    # The server's refusals, as it words them: a name taken (409), a quota that is not a number (422).
    _type(page, "create-name", "gamma")
    _type(page, "create-gpus", "2")
    click(page, "#create-button")
    assert "(409)" in _error(page, "gamma", "exists already")
    _type(page, "create-name", "delta")
    _type(page, "create-gpus", "lots")
    click(page, "#create-button")
    _error(page, "gpus", "(422)")
    assert not page.find_element(By.ID, "new-token").is_displayed()

    # Edit: quota, no borrowing limit, roots.
    shared = tmp_path / "shared"
    shared.mkdir()
    _manage(page, "gamma")
    assert page.find_element(By.ID, "edit-gpus").get_attribute("value") == "3"
    _type(page, "edit-gpus", "5")
    page.find_element(By.ID, "edit-borrow").clear()
    _type(page, "edit-roots", f"{shared}:ro")
    click(page, "#edit-save")
    wait_for(page, lambda d: (_tenant_cells(d, "gamma") or [])[:3] == ["gamma", "5", "any idle GPU"], 20,
             "the edit never showed in the table")
    wait_for(page, lambda d: (_tenant_cells(d, "gamma") or [""] * 7)[6] == f"{shared}:ro")
    got = {t["name"]: t for t in platform.call("GET", "/api/v1/tenants", platform.admin)["tenants"]}["gamma"]
    assert got["gpu_quota"] == 5 and got["borrow_limit"] is None
    assert got["roots"] == [{"path": str(shared), "writable": False}]
    # Roots the page cannot read, and a root the server refuses: both said, nothing changed.
    _type(page, "edit-roots", "no-mode-here")
    click(page, "#edit-save")
    _error(page, "roots, line 1", "PATH:ro or PATH:rw")
    _type(page, "edit-roots", "relative/dir:rw")
    click(page, "#edit-save")
    _error(page, "roots", "(422)")
    got = {t["name"]: t for t in platform.call("GET", "/api/v1/tenants", platform.admin)["tenants"]}["gamma"]
    assert got["roots"] == [{"path": str(shared), "writable": False}]

    # Delete: refused while a job is unfinished (409, the server's reason shown), done once it is cancelled.
    job = str(platform.call("POST", "/api/v1/jobs", token, json={
        "name": "holdout", "resources": {"gpus": 1, "cpus": 0.5}, "command": SLEEP})["id"])
    click(page, "#tenant-delete")
    _accept(page)
    message = _error(page, "unfinished jobs", job)
    assert "(409)" in message and "deleting tenant gamma failed" in message
    assert _tenant_cells(page, "gamma") is not None
    platform.call("POST", f"/api/v1/jobs/{job}/cancel", token)
    wait_for(page, lambda d: platform.call("GET", f"/api/v1/jobs/{job}", token)["status"] == "CANCELLED", 30,
             "the job was never cancelled")
    click(page, "#tenant-delete")
    _accept(page)
    wait_for(page, lambda d: _tenant_cells(d, "gamma") is None, 20, "the deleted tenant stayed in the table")
    assert "tenant gamma deleted (1 finished jobs' records" in page.find_element(By.ID, "tenants-result").text
    assert not page.find_element(By.ID, "tenants-error").is_displayed()
    assert not page.find_element(By.ID, "tenant-manage").is_displayed()
    assert _whoami(platform.url, token).status_code == 401


def test_issue_rotate_and_revoke_a_users_token(page: WebDriver, platform: Platform) -> None:
    platform.add_tenant("omega", 2)
    _open_admin(page, platform)
    _manage(page, "omega")
    wait_for(page, lambda d: _users(d) == ["default"], 20, "the tenant's first user was never listed")

    _type(page, "issue-user", "bob")
    _type(page, "issue-days", "2")
    click(page, "#issue-button")
    title, first = _new_token(page)
    assert "omega/bob" in title and "expires" in title
    assert _whoami(platform.url, first).json()["user"] == "bob"
    wait_for(page, lambda d: _users(d) == ["bob", "default"], 20, "bob never appeared among the users")

    # Refusals: a user name the server does not take (422, naming the field), days that are not a number.
    _type(page, "issue-user", "Bob Smith!")
    page.find_element(By.ID, "issue-days").clear()
    click(page, "#issue-button")
    _error(page, "user", "(422)")
    _type(page, "issue-user", "carol")
    _type(page, "issue-days", "soon")
    click(page, "#issue-button")
    _error(page, "expires in soon days")
    assert "carol" not in _users(page)

    # Rotate: a new token shown, the old one fails at once.
    click(page, '#tenant-users tr[data-user="bob"] button[data-action="rotate"]')
    _accept(page)
    title, second = _new_token(page, previous=first)
    assert "omega/bob" in title
    assert _whoami(platform.url, first).status_code == 401
    assert _whoami(platform.url, second).json()["user"] == "bob"

    # Revoke: bob's token fails, bob leaves the list; the default user keeps its token.
    click(page, '#tenant-users tr[data-user="bob"] button[data-action="revoke"]')
    _accept(page)
    wait_for(page, lambda d: _users(d) == ["default"], 20, "bob stayed among the users after the revoke")
    assert "1 token(s) of omega/bob revoked" in page.find_element(By.ID, "tenants-result").text
    assert _whoami(platform.url, second).status_code == 401
    assert _whoami(platform.url, platform.tokens["omega"]).status_code == 200
