"""A :class:`~hpo.planning.plan.Plan` as a spec in the house style: every line a setting and a
comment saying what it is and why that value (``search_spaces/digits.yaml``)."""

from __future__ import annotations

from typing import Any

import yaml

from hpo.doctor.schedule_checks import EPOCHS_BEFORE_MEMORISING
from hpo.planning.plan import HEADROOM, HELD_OUT, MIN_HELD_OUT, MOST, SIZES, Budget, Plan, Scoring, epochs
from hpo.spec.rules import MAX_EXTRAPOLATION, eval_points_words
from hpo.spec.samplers import sampler_facts, spacing_facts
from hpo.spec.spec import BASELINE_NAME

# The CPU quickstart's winner (README: trial 4 of search_spaces/digits.yaml, classifier-FID 2.64 against
# the by-hand baseline's 156.7): tried second, so a search starts from settings that worked on digits.
QUICKSTART_LR, QUICKSTART_T, QUICKSTART_SCHEDULE = 5.2e-3, 1000, "linear"
COMMENT_AT = 32  # comments start in this column, as in the shipped specs
SEARCH_COMMENT_AT = 72
Entry = tuple[str, Any, str]  # key, value, comment


def flow(value: Any) -> str:
    """One value as YAML on one line: lists and mappings in flow style, floats always readable back."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False).strip()
    return text.removesuffix("...").strip()


def line(indent: str, key: str, value: Any, comment: str, at: int = COMMENT_AT) -> str:
    body = f"{indent}{key}: {flow(value)}" if key else f"{indent}- {flow(value)}"
    return f"{body.ljust(at)} # {comment}"


def section(name: str, comment: str, entries: list[Entry]) -> list[str]:
    return [f"{name + ':':<{COMMENT_AT}} # {comment}", *(line("  ", k, v, c) for k, v, c in entries), ""]


def header(plan: Plan, data_path: str) -> list[str]:
    m, s = plan.machine, plan.survey
    return [
        f"# Written by `hpo init {data_path}` for {m.words}.",
        f"# The folder: {s.words()}.",
        "# Every value below says why it was chosen; `hpo doctor` checks the spec, `hpo launch` runs it.",
    ]


def study(plan: Plan) -> list[str]:
    gpu = plan.machine.kind == "gpu"
    return section("study", "the Optuna study", [
        ("name", plan.name, "Optuna study name; relaunching resumes it"),
        ("n_trials", plan.n_trials, "finished trials that end the study (the shipped " +
         ("GPU spec's 40)" if gpu else "CPU quickstart's 10)")),
        ("max_retries", 2, "re-runs of a trial whose worker died (preemption, crash)"),
        ("heartbeat_interval", 60 if gpu else 10, "seconds between heartbeats of a running trial"),
        ("target_kimg", plan.budget.target_kimg,
         f"the winner's real run: {MAX_EXTRAPOLATION:g}x a trial, as far as `hpo confirm --budgets` forecasts"),
    ])  # fmt: skip


def data(plan: Plan, data_path: str) -> list[str]:
    if plan.chosen_size:
        size_why = (
            f"the largest of {'/'.join(map(str, SIZES[1:]))} that {MOST:.0%} of the images reach on their smaller "
            f"side ({plan.size_share:.0%} do)"
        )
    else:
        size_why = f"--image-size; {plan.size_share:.0%} of the images reach it, the rest are upscaled"
    held = f"{plan.n_val} held out: validation metric, floor of real images"
    why_fraction = (
        held if plan.val_fraction == HELD_OUT else f"{held} (at least {MIN_HELD_OUT}, so more than {HELD_OUT:.0%})"
    )
    classes = "subfolders are classes" if plan.conditional else "no class subfolders: one class"
    return section("data", "what to train on", [
        ("source", "folder", f"a folder of images; {classes}"),
        ("path", data_path, "relative to the worker's working directory"),
        ("image_size", plan.image_size, size_why),
        ("val_fraction", plan.val_fraction, why_fraction),
    ])  # fmt: skip


def train(plan: Plan) -> list[str]:
    net, b, gpu = plan.network, plan.budget, plan.machine.kind == "gpu"
    res = ", ".join(map(str, net.resolutions))
    at = list(net.attention_resolutions)
    attention = [("attention_resolutions", at, f"self-attention at {at} px (DDPM), besides the middle block's")]
    kind = "the bikes spec's DDPM-CIFAR width" if gpu else "the CPU quickstart's width"
    return section("train", "fixed trainer settings; `search` overrides per trial", [
        ("kimg", b.kimg, f"a trial: {epochs(b.kimg, plan.n_train):.0f} epochs, 1/{MAX_EXTRAPOLATION:g} of the "
         f"{b.supported_kimg:g} kimg ({EPOCHS_BEFORE_MEMORISING} epochs) the data supports"
         + ("" if gpu else "; CPU: at most the quickstart trial's cost")),
        *points(b),
        ("base_channels", net.base_channels, f"{kind}: {net.parameters / 1e6:.1f}M parameters"),
        ("channel_mult", list(net.channel_mult), f"resolutions {res} px: down to 8 px (4 at 32 px on a GPU)"),
        ("num_res_blocks", net.num_res_blocks, "residual blocks per resolution"),
        ("parameterization", "mup", "µP: the lr found here holds at other widths (docs/transfer.md)"),
        ("mup_base_channels", net.base_channels, "the width the lr ranges below are for: this network's"),
        *(attention if at else []),
        ("dropout", 0.1, "regularises a small image collection"),
        ("hflip", True, "mirrors at random: right for most photos; false for text or digits"),
        ("prediction", "eps", "the network predicts the noise (search adds nothing here: the classic default)"),
        ("conditional", plan.conditional, "class-conditional + classifier-free guidance" if plan.conditional
         else "one class: unconditional"),
        ("p_uncond", 0.1 if plan.conditional else 0.0, "label dropout that trains the null class for guidance"
         if plan.conditional else "no labels to drop"),
        ("warmup_kimg", warmup_kimg(b.kimg), "learning-rate warm-up: the first 2% of a trial"),
        ("lr_schedule", plan.lr_schedule, SCHEDULE_WORDS[plan.lr_schedule]),
        ("ema_halflife_kimg", ema_halflife_kimg(b.kimg), "EMA half-life: 1/20 of a trial (the bikes spec's 50/1000)"),
        ("val_images", min(256 if gpu else 128, plan.n_val), "held-out images in the validation metric"),
        *([("seed", plan.seed, "weights, batches and noise of every trial")] if plan.seed else []),
    ])  # fmt: skip


SCHEDULE_WORDS = {
    "cosine": "decays to lr_floor at the budget's end: short runs rank more like long ones",
    "wsd": "flat, then a cooldown over the last 20 %: the final run continues the winner from before it",
    "linear": "decays linearly to lr_floor at the budget's end",
    "constant": "no decay after the warm-up",
}


def _small(x: float) -> float:
    return float(f"{x:.2g}")


def warmup_kimg(kimg: float) -> float:
    """The learning-rate warm-up of a run of ``kimg``: its first 2 %."""
    return _small(kimg / 50)


def ema_halflife_kimg(kimg: float) -> float:
    """The EMA half-life of a run of ``kimg``: 1/20 of it (the bikes spec's 50 of 1000)."""
    return _small(kimg / 20)


def sampling(plan: Plan) -> list[str]:
    sc, se = plan.scoring, plan.search
    n = len(se.guidance) * len(se.steps)
    guidance = (
        "guidance scales: swept on the trained weights, not bought with a run each"
        if plan.conditional
        else "1 only: an unconditional model has nothing to guide towards"
    )
    return section("sampling", "scored on every trained model: these never touch training", [
        ("guidance_scale", list(se.guidance), guidance),
        ("steps", list(se.steps), "sampler steps, each under the smallest T searched"),
        ("sampler", se.sampler, sampler_facts(se.sampler).why),
        ("spacing", se.spacing, spacing_facts(se.spacing).why),
        ("eta", 0.0, "deterministic"),
        *screen_lines(sc, n),
    ])  # fmt: skip


def screen_lines(sc: Scoring, n: int) -> list[tuple[str, Any, str]]:
    """The screen's settings, or why there is none (:func:`hpo.planning.plan.screen_if_it_pays`)."""
    if sc.screen_samples == 0:
        return [("screen_samples", 0, f"no screen: all {n} combinations on score.num_samples, the best the trial's "
                 "value; a screen's finalists could be every one of them here (docs/screening.md)")]  # fmt: skip
    return [
        ("screen_samples", sc.screen_samples, f"all {n} combinations scored on {sc.screen_samples} samples first ..."),
        ("screen_by", "pca", f"... by FID in {sc.screen_samples // 4} principal components (well-posed at that count)"),
        ("rescore_top", sc.rescore_top, f"... then the best {sc.rescore_top}, each guidance scale's best and the "
         "best at each cheaper cost on score.num_samples, the best of those the trial's value"),
    ]  # fmt: skip


def score(plan: Plan) -> list[str]:
    sc = plan.scoring
    if sc.features == "inception":
        why = "standard FID (clean-fid)" + (
            "; its weights are here" if sc.weights_present else
            "; run `hpo fetch-weights` once (the classifier needs 2+ classes)"
        )  # fmt: skip
    else:
        why = "FID on a small CNN trained on these classes (offline); `hpo fetch-weights` then inception for FID"
    return section("score", "how each finished trial is scored", [
        ("features", sc.features, why),
        ("num_samples", sc.num_samples, f"at {sc.num_samples} the best combination is picked as an unbiased count "
         "picks it (docs/screening.md)"
         if sc.features == "classifier" else f"the first power of two above the {sc.dims} feature dimensions"),
        ("batch_size", sc.batch_size, "sampling batch"),
        ("grid_size", 64, "images in each trial's sample grid"),
    ])  # fmt: skip


def sampler_and_pruner(plan: Plan) -> list[str]:
    gpu = plan.machine.kind == "gpu"
    sampler: list[Entry] = (
        [("name", "tpe", "parallel GPU workers: TPE's constant liar keeps them apart"),
         ("n_startup_trials", 8, "random trials before TPE models the space"),
         *([("seed", plan.seed, "each worker offsets it")] if plan.seed else [])]
        if gpu else
        [("name", "auto", "auto: tpe beside a pruner, gp without one (docs/spec.md \"Samplers\")"),
         ("seed", plan.seed, "each worker offsets it, so workers do not propose the same trial")]
    )  # fmt: skip
    return [
        *section("sampler", "how trials choose parameters", sampler),
        *section("pruner", "how lagging trials are stopped early (docs/spec.md \"Pruners\")", pruner(plan)),
    ]  # fmt: skip


def points(b: Budget) -> list[Entry]:
    if b.eval_spacing == "even":
        k = b.num_evals
        return [("num_evals", k, f"validation points at 1/{k} .. {k}/{k} of the budget (pruning steps)")]
    return [
        ("num_evals", b.num_evals, "validation points (pruning steps)"),
        ("eval_spacing", b.eval_spacing, eval_points_words(b.num_evals, b.eval_spacing).split(", ", 1)[1]),
    ]


def pruner(plan: Plan) -> list[Entry]:
    """The rung at 1/8 at doubling points, or the median at even ones (plan.POINTS says why)."""
    if plan.budget.eval_spacing == "doubling":
        return [
            ("name", "rung", "every trial pauses at 1/8 of its budget; once all have, the best there train on"),
            ("min_resource", 2, "the rung: the second evaluation point (1/8 of the budget)"),
            ("keep", 0, "trials continued: 0 = the most that still save 3x, at least 4"),
        ]
    return [
        ("name", "median", "stop a trial whose validation metric lags the median at the same point"),
        ("startup_trials", 2, "complete trials before pruning starts"),
        ("warmup_evals", 0, "the first evaluation point may already prune"),
        ("spare_until_complete", 4, "until 4 trials are complete, one ahead of the baseline is never stopped"),
    ]


def search(plan: Plan) -> list[str]:
    se, m = plan.search, plan.machine
    largest = se.batch_sizes[-1]
    fits = (
        f"images per step; {largest} is the largest whose ~{plan.network.need(largest) / 2**30:.0f} GiB "
        f"(the doctor's fp32 count) fits {HEADROOM:.0%} of {m.words}"
    )
    rows = [
        ("lr", {"type": "float", "low": se.lr[0], "high": se.lr[1], "log": True}, "AdamW learning rate"),
        ("batch_size", {"type": "categorical", "choices": list(se.batch_sizes)}, fits),
        ("timesteps", {"type": "categorical", "choices": list(se.timesteps)}, "T"),
        ("schedule", {"type": "categorical", "choices": list(se.schedules)}, "noise schedule"),
    ]
    baseline = {BASELINE_NAME: "by hand", "lr": 4.0e-4, "batch_size": se.batch_sizes[0], "timesteps": 1000,
                "schedule": "linear"}  # fmt: skip
    known = {BASELINE_NAME: "known start", "lr": QUICKSTART_LR, "batch_size": se.batch_sizes[0],
             "timesteps": QUICKSTART_T, "schedule": QUICKSTART_SCHEDULE}  # fmt: skip
    tried = [line("  ", "", known, "the CPU quickstart's winner on digits (README): a start that worked")]
    return [
        f"{'search:':<{COMMENT_AT}} # the training half of the six (guidance and steps: sampling)",
        *(line("  ", k, v, c, SEARCH_COMMENT_AT) for k, v, c in rows),
        "",
        f"{'baselines:':<{COMMENT_AT}} # enqueued first: by hand, then a known start (`name`: the report's word)",
        line("  ", "", baseline, "DDPM's T and schedule, the smallest batch, Adam's usual 4e-4"),
        *(tried if se.lr[0] <= QUICKSTART_LR <= se.lr[1] and QUICKSTART_T in se.timesteps else []),
    ]


def plan_yaml(plan: Plan, data_path: str) -> str:
    parts = [
        header(plan, data_path), study(plan), data(plan, data_path), train(plan), sampling(plan), score(plan),
        sampler_and_pruner(plan), search(plan),
    ]  # fmt: skip
    return "\n".join(text for part in parts for text in part).rstrip() + "\n"
