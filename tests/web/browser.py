"""One headless Chromium for the web tests, driven by Selenium through the system's chromedriver.

The flags keep the browser quiet on a machine without a network: without the background-networking,
component-update and sync switches Chromium keeps retrying connections to Google's services."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = os.environ.get("LOADMASTER_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("LOADMASTER_CHROMEDRIVER", "/usr/bin/chromedriver")

QUIET_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--no-default-browser-check",
    "--window-size=1400,1000",
)


def missing_binaries() -> list[str]:
    return [p for p in (CHROMIUM, CHROMEDRIVER) if not (Path(p).exists() or shutil.which(p))]


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """A fresh browser with a throw-away profile, quit and cleaned up when the block ends."""
    profile = tempfile.mkdtemp(prefix="lm-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in QUIET_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    # Console errors of the page are read back by the tests (a JS exception must fail them).
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
