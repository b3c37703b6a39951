"""The README's screenshots, taken from a running `make run` in Chromium: log in as the admin,
submit the demo's pre-filled fine-tune, wait for DONE, and shoot the form, the job page, the job
list and the output folder in the bucket browser.

    make run            # in another terminal
    .venv/bin/python scripts/screenshots.py [--url http://127.0.0.1:8000] [--out docs/img]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402


def log_in(page: Page, url: str, user: str, password: str) -> None:
    page.goto(f"{url}/login/")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()


def shoot(page: Page, url: str, out: Path) -> None:
    page.goto(f"{url}/p/demo/jobs/new/?tab=finetune")
    page.fill("#id_ft-name", "chat LoRA, demo model")
    page.wait_for_selector("[data-testid=estimate] strong")
    page.screenshot(path=out / "job-form.png", full_page=True)
    page.click("#job-form button[type=submit]")
    page.wait_for_url("**/jobs/*-*/")
    expect(page.locator("[data-testid=job-state]")).to_have_text("DONE", timeout=300_000)
    expect(page.locator("[data-testid=log-end]")).to_be_visible(timeout=30_000)
    page.screenshot(path=out / "job-detail.png", full_page=True)
    page.click("[data-testid=results-link]")
    page.wait_for_load_state()
    page.screenshot(path=out / "bucket.png")
    page.goto(f"{url}/p/demo/jobs/")
    page.screenshot(path=out / "job-list.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password-file", type=Path, default=ROOT / "var/admin-password.txt")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/img")
    args = parser.parse_args()
    password = args.password_file.read_text().split()[-1]
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        log_in(page, args.url, args.user, password)
        shoot(page, args.url, args.out)
        browser.close()
    print(f"screenshots in {args.out}")


if __name__ == "__main__":
    main()
