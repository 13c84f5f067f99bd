"""Headless Chromium through selenium and Debian's chromedriver (nothing is downloaded): what the HTML
report's benchmark (bench/html_report.py) and its browser test (tests/integration/test_report_browser.py)
load the report in, started one way for both."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

CHROMEDRIVER = Path("/usr/bin/chromedriver")


def missing_browser() -> str | None:
    """Why no headless Chromium can be started here, or None."""
    if shutil.which("chromium") is None:
        return "chromium is not installed (scripts/install-test-deps installs it)"
    if not CHROMEDRIVER.is_file():
        return f"{CHROMEDRIVER} is missing: install Debian's chromium-driver (scripts/install-test-deps)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def start_browser(window: tuple[int, int]) -> Any:
    """A headless Chromium with a ``window`` (width, height) in CSS pixels; ``missing_browser``
    must have said None."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update",
                     f"--window-size={window[0]},{window[1]}"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
