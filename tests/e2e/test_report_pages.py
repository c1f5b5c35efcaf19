"""Reports of known studies rendered in headless Chromium stay within the page width."""

from __future__ import annotations

import re
from pathlib import Path

from tests.browser import browse
from tests.report.test_report_verdicts import confirmed
from tests.service_helpers import study_report
from tests.study_builders import structured_study


def test_reports_of_known_studies_render_in_chromium_within_the_page_width(tmp_path: Path) -> None:
    structured = structured_study(tmp_path / "structured")
    source, _ = confirmed(tmp_path, "shown", {1: [5.0, 5.1, 5.2], 2: [6.0, 6.1, 6.2], 0: [8.0, 8.1, 8.2]})
    for study in (structured, source):
        path = study_report(study, tmp_path / f"{study.study_name}.html", artifact_dir=None)
        probe = path.with_name(f"probe-{path.name}")
        measure = (
            "<script>window.addEventListener('load',()=>setTimeout(()=>{document.body.setAttribute('data-width',"
            "document.documentElement.scrollWidth)},500))</script></body>"
        )
        probe.write_text(path.read_text().replace("</body>", measure))
        dom, log = browse(probe.as_uri(), tmp_path)
        assert "Uncaught" not in log, log[-2000:]
        width = int(re.search(r'data-width="(\d+)"', dom).group(1))  # type: ignore[union-attr]
        assert width <= 1280, f"{study.study_name}: the page is {width} px wide in a 1280 px window"
        assert dom.count('class="main-svg"') >= 2 * dom.count('class="plotly-graph-div')
