"""Plotly.js in the report: included once, gzip-compressed and unpacked by the browser
(``DecompressionStream``, every current browser), so the file stays small and still opens offline.

The report draws only cartesian traces (bar, scatter, heatmap, contour), so it carries plotly.js's
cartesian bundle (``static/``, from npm's ``plotly.js-cartesian-dist-min``, MIT): 496 KB compressed
against 1.47 MB for the full bundle the ``plotly`` package ships. When the installed ``plotly`` wants
another plotly.js version, the full bundle of that version is used instead. Figure scripts wait in
``<script type="text/x-hpo-plot">`` tags and run, in page order, once Plotly is defined; then the
document gets an ``hpo-plotted`` event."""

from __future__ import annotations

import base64
import functools
import gzip
import logging
import re
from pathlib import Path

from plotly.offline import get_plotlyjs

log = logging.getLogger("hpo.report")

STATIC = Path(__file__).with_name("static")
CARTESIAN_TRACES = frozenset(
    {"bar", "box", "contour", "heatmap", "histogram", "histogram2d", "histogram2dcontour", "image", "pie", "scatter"}
    | {"scatterternary", "violin"}
)
DEFERRED = "text/x-hpo-plot"
_SCRIPT = re.compile(r"<script(?: type=[\"']text/javascript[\"'])?>")  # plotly 5 writes the type, 6+ does not
_VERSION = re.compile(r"plotly\.js(?: \([^)]*\))? v(\d+\.\d+\.\d+)")

LOADER = f"""(async()=>{{const b=Uint8Array.from(atob(document.getElementById('hpo-plotly').textContent),
c=>c.charCodeAt(0));const js=await new Response(new Blob([b]).stream().pipeThrough(new DecompressionStream('gzip')))
.text();if(document.readyState==='loading')await new Promise(r=>document.addEventListener('DOMContentLoaded',r));
const s=document.createElement('script');s.textContent=js;document.head.appendChild(s);
for(const p of document.querySelectorAll('script[type="{DEFERRED}"]')){{const r=document.createElement('script');
r.textContent=p.textContent;p.replaceWith(r)}}document.dispatchEvent(new Event('hpo-plotted'))}})();"""


def version_of(js: str) -> str | None:
    match = _VERSION.search(js[:400])
    return match.group(1) if match else None


@functools.lru_cache(maxsize=1)
def compressed_plotly() -> tuple[str, bytes]:
    """(which bundle, its gzip bytes): the vendored cartesian bundle when its version is the one the
    installed ``plotly`` generates figures for, else that package's full bundle."""
    wanted = version_of(get_plotlyjs())
    vendored = STATIC / f"plotly-cartesian-{wanted}.min.js.gz"
    if vendored.is_file():
        return f"plotly.js {wanted} (cartesian)", vendored.read_bytes()
    log.info("no cartesian plotly.js %s in %s: the report carries the full bundle", wanted, STATIC)
    return f"plotly.js {wanted}", gzip.compress(get_plotlyjs().encode(), compresslevel=9, mtime=0)


def defer(figure_html: str) -> str:
    """A figure's HTML whose script runs once Plotly is loaded."""
    return _SCRIPT.sub(f'<script type="{DEFERRED}">', figure_html)


def loader_html() -> str:
    name, data = compressed_plotly()
    return (
        f"<!-- {name}, gzip + base64 --><script type='application/octet-stream' id='hpo-plotly'>"
        f"{base64.b64encode(data).decode()}</script><script>{LOADER}</script>"
    )
