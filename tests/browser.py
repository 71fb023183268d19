"""Headless Chromium (Debian's package) driven by Playwright, for checking pages as a person sees
them. The browser is Debian's, from `make system-packages`; Playwright never downloads one."""

import shutil
from pathlib import Path

from missing_tools import unavailable

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # This machine's network is closed: without these Chromium keeps trying to reach out.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    """The path of Debian's Chromium (from `make system-packages`)."""
    found = shutil.which("chromium")
    if found is None:
        unavailable("chromium is not installed", "make system-packages (as root)")
    return found


def open_page(path: Path, screenshot: Path, wait_for_text: str) -> tuple[str, list[str]]:
    """Load a local page, wait until `wait_for_text` shows, save a full-page screenshot; return
    the page's visible text and every console error and uncaught exception."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.resolve().as_uri())
        page.get_by_text(wait_for_text).first.wait_for(timeout=30_000)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screenshot), full_page=True)
        text = page.inner_text("body")
        browser.close()
    return text, errors
