# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The HTML report opened from its report directory in a headless browser (chromium): the page
renders, its tables and details are there, and the plot next to it loads inline."""

from __future__ import absolute_import, division, print_function

import base64
import json
import os
import shutil
import subprocess

import pytest

from ansible_collections.stacktune.gpu.plugins.filter import run_report as filters

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "report")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "headless_shell")
# a 1x1 PNG: the report's plot, as far as the page is concerned
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.skipif(
    browser() is None and os.environ.get("CI") != "true",
    reason="no headless chromium on this machine (apt-get install chromium; CI installs it: tools/bootstrap.sh test)",
)
def test_the_html_report_renders_in_a_browser(tmp_path):
    with open(os.path.join(FIXTURES, "cases.json")) as handle:
        case = json.load(handle)[0]
    text = filters.report_markdown(case["results"], "localhost", "run-0", case["fx"], plot={"skipped": False})
    (tmp_path / "localhost.html").write_text(filters.report_html(text))
    (tmp_path / "localhost.png").write_bytes(PIXEL)
    run = [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files"]
    url = (tmp_path / "localhost.html").as_uri()
    dom = subprocess.run(run + ["--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    assert "<title>stacktune run run-0 on localhost</title>" in dom
    assert dom.count("<table>") >= 3 and "kernel: details" in dom
    assert '<img src="localhost.png"' in dom
    shot = tmp_path / "shot.png"
    subprocess.run(
        run + ["--screenshot=%s" % shot, "--window-size=1200,2000", url], capture_output=True, timeout=120, check=True
    )
    assert shot.stat().st_size > 5000
