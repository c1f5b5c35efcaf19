"""`hpo init`: from a folder of images to a commented spec that the doctor passes and that launches,
planned from the folder's facts and the machine's memory; awkward folders get a spec or one line."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image, ImageDraw

from hpo.doctor.schedule_checks import supported_kimg
from hpo.doctor.survey import survey_folder
from hpo.planning.plan import MIN_IMAGES, Machine, plan_spec
from hpo.planning.spec_yaml import pruner
from hpo.run.options import RunOptions
from hpo.run.phases.plan import first_plan
from hpo.spec.loading import load_spec
from hpo.spec.rules import MAX_EXTRAPOLATION
from tests.cli import run_cli


def draw_shapes(folder: Path, n: int, size: int | tuple[int, int], *, seed: int = 0, suffix: str = "png") -> None:
    """``n`` coloured ellipses or squares on coloured backgrounds."""
    rnd = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    w, h = (size, size) if isinstance(size, int) else size
    for i in range(n):
        img = Image.new("RGB", (w, h), tuple(rnd.randrange(256) for _ in range(3)))
        x, y, r = rnd.randrange(w // 2), rnd.randrange(h // 2), max(2, min(w, h) // 3)
        shape = ImageDraw.Draw(img).ellipse if seed % 2 else ImageDraw.Draw(img).rectangle
        shape([x, y, x + r, y + r], fill=tuple(rnd.randrange(256) for _ in range(3)))
        img.save(folder / f"{i}.{suffix}")


def two_classes(root: Path, per_class: int = 60, size: int = 32) -> Path:
    draw_shapes(root / "circles", per_class, size, seed=1)
    draw_shapes(root / "squares", per_class, size, seed=2)
    return root


def init(*args: str) -> tuple[int, str, str]:
    return run_cli(["init", *args])


def edit(path: Path, changes: dict[str, dict[str, Any]]) -> None:
    raw = yaml.safe_load(path.read_text())
    for section, values in changes.items():
        raw[section] = {**raw[section], **values}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def test_one_class_gets_an_unconditional_spec_without_a_guidance_sweep(tmp_path: Path) -> None:
    draw_shapes(tmp_path / "bikes", 80, 32)
    code, out, err = init(str(tmp_path / "bikes"), "-o", "one.yaml")
    assert code == 0, err
    spec = load_spec("one.yaml")
    assert not spec.train.conditional and spec.sampling.values("guidance_scale") == (1.0,)
    assert spec.score.features == "inception"  # the feature classifier needs two classes
    assert "1 class (no class subfolders: unconditional)" in out
    assert "data: the images take 0.00 GB as uint8; one shared copy per host" in out
    assert (spec.train.num_evals, spec.train.eval_spacing, spec.pruner.name) == (4, "even", "median")  # CPU: 10 trials


def test_the_search_starts_with_the_by_hand_baseline_then_the_quickstarts_winner(tmp_path: Path) -> None:
    from hpo.planning.spec_yaml import QUICKSTART_LR, QUICKSTART_SCHEDULE, QUICKSTART_T

    draw_shapes(tmp_path / "bikes", 80, 32)
    code, _, err = init(str(tmp_path / "bikes"), "-o", "start.yaml")
    assert code == 0, err
    spec = load_spec("start.yaml")
    hand, known = spec.baselines
    assert hand["lr"] == 4e-4 and hand["timesteps"] == 1000
    assert (known["lr"], known["timesteps"], known["schedule"]) == (QUICKSTART_LR, QUICKSTART_T, QUICKSTART_SCHEDULE)
    assert [spec.baseline_name(i) for i in range(2)] == ["by hand", "known start"]
    assert "name" not in hand and "name" not in known  # a name is no parameter


def test_a_planned_specs_baseline_names_round_trip_and_never_reach_a_trials_params(tmp_path: Path) -> None:
    from hpo.records import TrialRecord
    from hpo.service.storage import open_storage
    from hpo.service.study import create_or_resume
    from hpo.spec.spec import parse_stored

    draw_shapes(tmp_path / "bikes", 80, 32)
    code, _, err = init(str(tmp_path / "bikes"), "-o", "start.yaml")
    assert code == 0, err
    spec = load_spec("start.yaml")
    again = parse_stored(json.dumps(spec.to_dict()), study_name=spec.study.name)  # as a study stores it
    assert again.baseline_names == ("by hand", "known start") and again.fingerprint() == spec.fingerprint()
    study, _ = create_or_resume(spec, open_storage(f"sqlite:///{tmp_path / 'hpo.db'}"))
    queued = study.get_trials()
    assert [TrialRecord.of(t).baseline_name for t in queued] == ["by hand", "known start"]
    assert all("name" not in t.system_attrs["fixed_params"] for t in queued)


def test_mixed_sizes_train_at_the_size_most_images_reach(tmp_path: Path) -> None:
    draw_shapes(tmp_path / "mixed" / "a", 50, (80, 120), seed=1)
    draw_shapes(tmp_path / "mixed" / "b", 45, 70, seed=2)
    draw_shapes(tmp_path / "mixed" / "b", 5, 24, seed=3, suffix="jpg")  # 5% too small: upscaled
    code, out, err = init(str(tmp_path / "mixed"), "-o", "mixed.yaml")
    assert code == 0, err
    assert load_spec("mixed.yaml").data.image_size == 64
    assert "80x120 (50), 70x70 (45), 24x24 (5)" in out


def test_a_few_unreadable_files_are_counted_and_named_not_fatal(tmp_path: Path) -> None:
    photos = two_classes(tmp_path / "photos", per_class=40)
    (photos / "circles" / "broken.png").write_bytes(b"not a png")
    code, out, err = init(str(photos), "-o", "spec.yaml")
    assert code == 0, err
    assert "1 unreadable, first: " in out and "broken.png" in out
    assert load_spec("spec.yaml").data.image_size == 32


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("twelve", f"only 12 readable images: hpo init needs at least {MIN_IMAGES}"),
        ("empty", "no images"),
        ("file", "not a folder"),
        ("unreadable", "12 of 20 images are unreadable"),
    ],
)
def test_folders_that_cannot_train_are_refused_in_one_line(tmp_path: Path, layout: str, message: str) -> None:
    target = tmp_path / "data"
    if layout == "twelve":
        draw_shapes(target, 12, 32)
    elif layout == "empty":
        target.mkdir()
    elif layout == "file":
        target.write_text("a file, not a folder")
    else:
        draw_shapes(target, 8, 32)
        for i in range(12):
            (target / f"bad{i}.jpg").write_bytes(b"\xff\xd8 truncated")
    code, out, err = init(str(target), "-o", "spec.yaml")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not Path("spec.yaml").exists()


def test_an_existing_spec_is_kept_unless_forced(tmp_path: Path) -> None:
    photos = two_classes(tmp_path / "photos", per_class=40)
    Path("spec.yaml").write_text("mine\n")
    code, _, err = init(str(photos), "-o", "spec.yaml")
    assert code == 2 and "spec.yaml exists; pass --force" in err
    assert Path("spec.yaml").read_text() == "mine\n"
    code, _, err = init(str(photos), "-o", "spec.yaml", "--force", "--name", "again")
    assert code == 0, err
    assert load_spec("spec.yaml").study.name == "again"


def plan_for(folder: Path, gpu_gb: float, image_size: int | None = None) -> Any:
    machine = Machine("gpu", int(gpu_gb * 2**30), f"a {gpu_gb:g} GiB GPU")
    return plan_spec(survey_folder(folder), machine, name="t", image_size=image_size, weights_present=False)


def test_image_size_is_the_largest_the_images_support(tmp_path: Path) -> None:
    draw_shapes(tmp_path / "forty", 64, 40)
    draw_shapes(tmp_path / "big", 64, (300, 340))
    assert plan_for(tmp_path / "forty", 80).image_size == 32
    big = plan_for(tmp_path / "big", 80)
    assert big.image_size == 256
    assert big.network.channel_mult == (1, 1, 1, 2, 2, 2)  # down to 8 px: one level per doubling
    assert plan_for(tmp_path / "big", 80, image_size=64).network.channel_mult == (1, 2, 2, 2)  # the bikes network


def test_a_smaller_gpu_gets_smaller_batch_sizes_for_the_same_folder(tmp_path: Path) -> None:
    draw_shapes(tmp_path / "photos", 200, 128)
    small, large = plan_for(tmp_path / "photos", 8), plan_for(tmp_path / "photos", 80)
    assert small.network == large.network
    assert max(small.search.batch_sizes) < max(large.search.batch_sizes)
    for plan, gb in ((small, 8), (large, 80)):
        largest = max(plan.search.batch_sizes)
        assert plan.network.need(largest) <= 0.9 * gb * 2**30 < plan.network.need(2 * largest) or largest == 128


def test_the_plan_says_where_the_data_will_train_by_its_size(tmp_path: Path) -> None:
    draw_shapes(tmp_path / "photos", 200, 128)
    cpu = Machine("cpu", 8 * 2**30, "this CPU")
    plan = plan_spec(survey_folder(tmp_path / "photos"), cpu, name="t", image_size=64, weights_present=False)
    assert plan.data_bytes == 200 * 3 * 64 * 64
    assert "one shared copy per host" in plan.data_words(host_bytes=2**30)
    assert "streamed from the cache on disk" in plan.data_words(host_bytes=plan.data_bytes)
    assert "kept on the GPU" in plan_for(tmp_path / "photos", 80, image_size=64).data_words(host_bytes=2**30)


def test_6500_photos_at_128px_are_planned_in_seconds(tmp_path: Path) -> None:
    draw_shapes(tmp_path / "bikes", 6500, 128, suffix="jpg")
    started = time.perf_counter()
    code, _, err = init(str(tmp_path / "bikes"), "-o", "bikes128.yaml", "--gpu-memory", "80", "--name", "bikes128")
    seconds = time.perf_counter() - started
    assert code == 0, err
    print(f"hpo init on 6500 128 px photos: {seconds:.1f} s")
    spec = load_spec("bikes128.yaml")
    n_train = 6500 - 650
    assert (spec.data.image_size, spec.data.val_fraction) == (128, 0.1)
    assert (spec.train.base_channels, spec.train.channel_mult, spec.train.attention_resolutions) == (
        128, (1, 1, 2, 2, 2), (16,),
    )  # fmt: skip
    assert spec.train.kimg == 730 and spec.study.target_kimg == MAX_EXTRAPOLATION * 730
    assert spec.study.target_kimg <= supported_kimg(n_train) < MAX_EXTRAPOLATION * 740
    assert (spec.train.num_evals, spec.train.eval_spacing) == (5, "doubling")  # 40 trials: the rung pays
    assert (spec.pruner.name, spec.pruner.min_resource, spec.pruner.keep) == ("rung", 2, 0)
    assert seconds < 30


def test_hpo_runs_plan_on_a_gpu_pauses_at_the_rung_as_hpo_inits_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hpo run`'s search ends at a deadline; replayed against it (benchmarks/run_search_replay.py),
    the rung's best was as good as successive halving's or better with trials up to 2x slower than
    timed, with random draws and with TPE but for digits at 30 trials as timed: its plan uses the
    rung too."""
    draw_shapes(tmp_path / "photos", 200, 64)
    gpu = Machine("gpu", 80 * 2**30, "an 80 GiB GPU")
    monkeypatch.setattr("hpo.run.phases.plan.this_machine", lambda _: gpu)
    opts = RunOptions(images=tmp_path / "photos", budget="8h", out=None, image_size=None, storage=None, workers=None,
                      threads=1)  # fmt: skip
    entries = dict((k, v) for k, v, _ in pruner(first_plan(opts)))
    assert (entries["name"], entries["min_resource"], entries["keep"]) == ("rung", 2, 0)
    assert dict((k, v) for k, v, _ in pruner(plan_for(tmp_path / "photos", 80))) == entries
