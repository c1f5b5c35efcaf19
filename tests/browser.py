"""Headless Chromium for the tests that read a page as a person would (the report, the dashboard)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is required in CI (Debian package chromium)")
        pytest.skip("chromium not installed")
    return path


def browse(url: str, tmp: Path, *, screenshot: Path | None = None) -> tuple[str, str]:
    """(rendered DOM, browser log) after the page's scripts ran."""
    args = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=15000",
        "--window-size=1280,2400",
    ]
    if screenshot is not None:
        args.append(f"--screenshot={screenshot}")
    else:
        args.append("--dump-dom")
    done = subprocess.run([*args, url], capture_output=True, text=True, timeout=120)
    return done.stdout, done.stderr
