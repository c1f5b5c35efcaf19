"""The quickstart-sized report read as a person reads it, in Chromium: a header that says what the
study was, the sampling sentence about the best trial's own best combination, no chart without
points, one colour per trial in every chart, KID on a scale, and the file small."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import optuna
from optuna.trial import TrialState

from hpo.files import JsonObject
from hpo.records import DATA_ATTR, FLOOR_ATTR
from tests.browser import browse
from tests.service_helpers import study_report
from tests.study_builders import add, new_study, planted_sweep, random_params

STEPS, SCALES = (10, 20, 30), (1.0, 2.0, 3.0)
# Every chart's traces: its point count, and the colour of each trial it names (by trace or point).
PROBE = """<script>document.addEventListener('hpo-plotted',()=>setTimeout(()=>{const out={plots:[],colours:{}};
const note=(name,c)=>{const m=/^#(\\d+)/.exec(name||'');
if(m&&typeof c==='string')(out.colours[m[1]]=out.colours[m[1]]||[]).push(c)};
for(const gd of document.querySelectorAll('.js-plotly-plot')){let n=0;for(const tr of gd.data){
n+=tr.z?Array.from(tr.z).flatMap(r=>Array.from(r)).filter(v=>v!==null&&!Number.isNaN(v)).length:(tr.x||[]).length;note(tr.name,(tr.line&&tr.line.color)||
(tr.marker&&tr.marker.color));if(Array.isArray(tr.text)&&tr.marker&&Array.isArray(tr.marker.color))
tr.text.forEach((t,i)=>note(t,tr.marker.color[i]))}out.plots.push(n)}
document.body.setAttribute('data-probe',JSON.stringify(out))},300))</script></body>"""


def sweep_best_at(best: tuple[int, float], level: float, rng: np.random.Generator) -> list[JsonObject]:
    grid = {(n, w): level + 1.0 + rng.uniform(0, 2) for n in STEPS for w in SCALES}
    grid[best] = level
    return planted_sweep(grid)


def quickstart_sized(tmp_path: Path) -> optuna.Study:
    """10 trials like the quickstart's with the baseline guard: the baseline (near 130, best at
    guidance 3 / 20 steps), 3 more complete (the best at guidance 2 / 30 steps), 6 pruned at the
    first point."""
    study = new_study(tmp_path, "reader")
    study.set_user_attr(DATA_ATTR, {"train": 1527, "held_out": 270, "classes": 10, "image_size": 16, "channels": 1})
    study.set_user_attr(FLOOR_ATTR, {"score": 0.85, "score_sd": 0.09, "num_images": 256, "kid": 0.0123})
    rng = np.random.default_rng(7)
    add(study, random_params(rng), value=130.0, curve=[0.9, 0.8, 0.7, 0.65], baseline=True, kid=40.0,
        sweep=sweep_best_at((20, 3.0), 130.0, rng))  # fmt: skip
    for value, favourite in ((5.0, (30, 2.0)), (7.0, (10, 1.0)), (9.0, (20, 3.0))):
        curve = [0.8, 0.6, 0.5, 0.45 + value / 100]
        add(study, random_params(rng), value=value, curve=curve, kid=1.8, sweep=sweep_best_at(favourite, value, rng))
    for _ in range(6):
        add(study, random_params(rng), value=None, curve=[float(rng.uniform(1.0, 9.0))], state=TrialState.PRUNED)
    return study


def test_the_quickstart_sized_report_says_what_the_study_was_and_draws_every_trial_in_one_colour(
    tmp_path: Path,
) -> None:
    study = quickstart_sized(tmp_path)
    path = study_report(study, tmp_path / "reader.html")
    page = path.read_text()
    assert "<b>Data</b>: digits at 16 px: 1,527 training + 270 held-out images, 10 classes" in page
    assert "<b>Budget</b>: 1.6 kimg per trial" not in page  # the spec's budget, not a trial's
    assert re.search(r"<b>Trials</b>: 10 of 40 \(4 complete, 6 pruned\)", page)
    assert "KID 1.8 (unbiased MMD² of the same features, 0 = indistinguishable from the reference; real " in page
    assert "real held-out images: 0.0123" in page
    best = study.best_trial.number
    assert f"For the best trial (#{best}): guidance 2 at 30 DDIM steps samples best" in page
    assert len(page.encode()) < 2_000_000, len(page.encode())
    probe = path.with_name("probe.html")
    probe.write_text(page.replace("</body>", PROBE))
    dom, log = browse(probe.as_uri(), tmp_path)
    assert "Uncaught" not in log, log[-2000:]
    found = json.loads(re.search(r"data-probe=\"([^\"]*)\"", dom).group(1).replace("&quot;", '"'))  # type: ignore[union-attr]
    assert len(found["plots"]) >= 6 and min(found["plots"]) >= 2, found["plots"]  # no chart without points
    colours = {int(k): set(v) for k, v in found["colours"].items()}
    assert set(colours) == {t.number for t in study.trials}  # the curves name every trial, pruned ones too
    assert all(len(c) == 1 for c in colours.values()), colours  # one colour per trial in every chart
    assert len({next(iter(c)) for c in colours.values()}) == len(colours)  # and no two trials share one


def test_with_two_complete_trials_the_search_charts_are_a_sentence(tmp_path: Path) -> None:
    study = new_study(tmp_path, "two")
    rng = np.random.default_rng(1)
    for value in (5.0, 130.0):
        add(study, random_params(rng), value=value, curve=[0.8, 0.6])
    for _ in range(8):
        add(study, random_params(rng), value=None, curve=[2.0], state=TrialState.PRUNED)
    page = study_report(study, tmp_path / "two.html").read_text()
    search = page[page.index("<h2>The search</h2>") : page.index("<h2>Samples</h2>")]
    assert "are drawn from 3 complete trials; this study has 2: #0, #1" in search
    assert "plotly-graph-div" not in search
