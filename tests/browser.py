"""What the browser tests share: finding Debian's Chromium (launched by path; nothing downloads a
browser) and launching it headless through Playwright, or skipping with a reason that says how to
get one."""
import os
import shutil

import pytest

HOW_TO_GET_ONE = ("install it with `sudo apt-get install chromium` (Debian/Ubuntu; `.ci/run` does this), "
                  "or point MINIRL_CHROMIUM at a Chromium or Chrome executable")


def chromium_path() -> str | None:
    """MINIRL_CHROMIUM if set, else the first of chromium, chromium-browser, google-chrome on PATH."""
    if os.environ.get("MINIRL_CHROMIUM"):
        return os.environ["MINIRL_CHROMIUM"]
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for a test module; skips (with how to get one) where there is none."""
    path = chromium_path()
    if path is None:
        pytest.skip(f"no Chromium found: {HOW_TO_GET_ONE}")
    playwright = pytest.importorskip("playwright.sync_api", reason="Playwright is missing: make install")
    with playwright.sync_playwright() as p:
        # --no-sandbox: CI containers run as root, where Chromium's sandbox refuses to start
        chrome = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield chrome
        chrome.close()
