"""Fixtures for the dashboard tests: one real headless Chromium for the whole session, and one real platform
(`loadmaster server`: API, control loop, local executor on `--nodes 2x4`, a SQLite file) per test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.remote.webdriver import WebDriver

from tests.web.browser import chromium, missing_binaries
from tests.web.pages import page_errors
from tests.web.platform import Platform, running_platform


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"Chromium/ChromeDriver not installed ({', '.join(missing)}); install the Debian packages "
                    "chromium and chromium-driver, or set LOADMASTER_CHROMIUM / LOADMASTER_CHROMEDRIVER")
    with chromium() as driver:
        yield driver


@pytest.fixture
def page(browser: WebDriver) -> Iterator[WebDriver]:
    """The session's browser for one test, which must leave no JavaScript error behind."""
    browser.get_log("browser")  # drop what earlier tests left
    yield browser
    errors = page_errors(browser)
    assert not errors, f"the page raised JavaScript errors: {errors}"


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    root: Path = tmp_path_factory.mktemp("platform")
    with running_platform(root) as p:
        yield p
