"""``hpo init``'s choices: a folder's facts and a machine in, a typed :class:`Plan` out, each value
chosen by a rule stated beside it (:mod:`hpo.planning.spec_yaml` writes the plan as a commented spec).

The rules reuse the doctor's: the budget is the data-budget check's (:func:`supported_kimg`), the
batch sizes fit the memory by the memory check's own count (:func:`saved_bytes`, :func:`state_bytes`),
and sample counts clear the dimensions the scoring check asks for (:func:`feature_dim`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch

from hpo.doctor.model_checks import LARGE_NETWORK, saved_bytes, state_bytes
from hpo.doctor.schedule_checks import supported_kimg
from hpo.doctor.survey import FolderSurvey
from hpo.errors import HpoError
from hpo.spec.config import LrSchedule, TrainConfig
from hpo.spec.counts import feature_dim
from hpo.spec.rules import MAX_EXTRAPOLATION, EvalSpacing, min_eval_steps
from hpo.spec.samplers import SamplerName, Spacing
from hpo.spec.sampling import RESCORE_TOP, SCREEN_PAYS, SamplingSweep
from hpo.training.batches import host_memory_bytes, placement_words, planned_placement
from hpo.training.data import held_out_count
from hpo.training.model import count_parameters, info_for, network_for

SIZES = (16, 32, 64, 128, 256)  # what init chooses from: the largest the images support (16 only as a fallback)
MOST = 0.9  # ... that the smaller side of at least this share of the images reaches (the rest are upscaled)
HELD_OUT = 0.1  # share held out for the validation metric and the floor of real images ...
MIN_HELD_OUT = 32  # ... but at least this many: with fewer, one image's noise decides which trials are pruned
MIN_IMAGES = 2 * MIN_HELD_OUT  # held out at most half: as many left to train on as are held out
MAX_BATCH = 128  # the shipped specs' largest batch size
HEADROOM = 0.9  # the estimate must fit in this share of the memory: CUDA's context, workspaces, fragmentation
CPU_KIMG_AT_16 = 12.0  # the CPU quickstart's trial (12 kimg at 16 px, ~90 s of training on 2 cores; README)
FIXED_BATCH = 1  # the memory estimate counts a step at these two batch sizes: their difference is one image
Kind = Literal["gpu", "cpu"]
# A trial's evaluation points per machine kind (its study size: 40 trials on a GPU, 10 on a CPU):
# replayed on 216 trained configurations per dataset (300 draws), pruner: rung at the second of 5
# doubling points (1/8) saved 3.04x on both datasets at 30 trials for mean regrets of 0.036 / 0.000
# seed sd (digits / shapes), 3.07x at 100 (0.000 / 0.000), 2.11x at 10 with 4 complete in every study;
# the median at 4 even points 2.08x / 2.04x at 30 (docs/benchmarks.md "Pruners").
POINTS: dict[Kind, tuple[int, EvalSpacing]] = {"gpu": (5, "doubling"), "cpu": (4, "even")}


# Classifier-FID's full count, every combination scored on it: at 1 024 the best picked was within 2 sd
# of a difference of truth's best on every good model measured (digits, shapes, two cuts of
# scikit-learn's photos, scikit-image's photos), at most 2.1 % worse (28 models); at 512 FID's count
# bias, which grows with a combination's spread, put another guidance scale first on photos-7, 6.4 %
# worse (benchmarks/sweep_truth.py, docs/screening.md).
CLASSIFIER_SAMPLES = 1024


@dataclass(frozen=True)
class Machine:
    kind: Kind
    memory_bytes: int  # what the batch sizes must fit in
    words: str  # where the number comes from, for the summary and the spec's comments


@dataclass(frozen=True)
class Network:
    base_channels: int
    channel_mult: tuple[int, ...]
    num_res_blocks: int
    attention_resolutions: tuple[int, ...]
    parameters: int
    state_bytes: int  # weights, gradients, Adam moments, EMA
    step_bytes: int  # saved activations of a one-image step (fixed part included)
    image_bytes: int  # saved activations of each further image
    top: int  # the image size it is sized for

    def need(self, batch: int) -> int:
        """The doctor's memory estimate of a training step at ``batch`` (fp32 counts; bf16 saves less)."""
        return self.state_bytes + self.step_bytes + (batch - 1) * self.image_bytes

    @property
    def resolutions(self) -> tuple[int, ...]:
        return tuple(self.top >> i for i in range(len(self.channel_mult)))


@dataclass(frozen=True)
class Budget:
    kimg: float  # one trial
    target_kimg: float  # the winner's real run
    supported_kimg: float  # what the training images support before memorising is likely
    num_evals: int
    eval_spacing: EvalSpacing


@dataclass(frozen=True)
class Scoring:
    features: Literal["inception", "classifier"]
    dims: int
    num_samples: int
    screen_samples: int
    batch_size: int
    rescore_top: int
    weights_present: bool


@dataclass(frozen=True)
class SearchPlan:
    lr: tuple[float, float]
    batch_sizes: tuple[int, ...]
    timesteps: tuple[int, ...]
    schedules: tuple[str, ...]
    guidance: tuple[float, ...]
    steps: tuple[int, ...]
    sampler: SamplerName  # the solver taking those steps
    spacing: Spacing  # its timesteps


@dataclass(frozen=True)
class Plan:
    name: str
    survey: FolderSurvey
    machine: Machine
    image_size: int
    size_share: float  # share of the images whose smaller side reaches image_size
    chosen_size: bool  # chosen by the rule (else --image-size)
    val_fraction: float
    n_train: int
    n_val: int
    conditional: bool
    network: Network
    budget: Budget
    scoring: Scoring
    search: SearchPlan
    n_trials: int
    seed: int = 0  # the study sampler's and the trainer's seed (`hpo run --seed`)
    lr_schedule: LrSchedule = "cosine"  # `hpo run`: wsd, so that its final run continues the winner's state

    @property
    def data_bytes(self) -> int:
        """The preprocessed set's bytes (uint8 RGB), what the cache and a worker's memory hold."""
        return self.survey.num_images * 3 * self.image_size**2

    def data_words(self, host_bytes: int | None = None) -> str:
        """Where the set will train on this machine (:func:`hpo.training.batches.planned_placement`)."""
        gpu = self.machine.memory_bytes if self.machine.kind == "gpu" else None
        memory = host_memory_bytes() if host_bytes is None else host_bytes
        where = planned_placement(self.data_bytes, gpu_free_bytes=gpu, host_bytes=memory)
        return placement_words(where, self.data_bytes)


def choose_image_size(survey: FolderSurvey, requested: int | None) -> int:
    if requested is not None:
        if not (16 <= requested <= 1024 and requested % 8 == 0):
            raise HpoError(f"--image-size {requested}: use a multiple of 8 from 16 to 1024 (e.g. 32, 64, 128, 256)")
        return requested
    supported = [s for s in SIZES if survey.share_at_least(s) >= MOST]
    if not supported:
        small = sorted(min(s) for s in survey.census.sizes)[len(survey.census.sizes) // 2]
        raise HpoError(
            f"{survey.root}: most images are smaller than {SIZES[0]} px (median smaller side {small} px); "
            "hpo trains at 16 px or more: pass --image-size 16 to upscale them"
        )
    return supported[-1]


def held_out(n: int) -> tuple[float, int]:
    """(val_fraction, held-out count): a tenth, or at least :data:`MIN_HELD_OUT` images."""
    if n < MIN_IMAGES:
        raise HpoError(
            f"only {n} readable images: hpo init needs at least {MIN_IMAGES} — {MIN_HELD_OUT} held out for the "
            "validation metric and the floor of real images (with fewer, one image decides which trials are "
            "pruned) and as many to train on; add images"
        )
    fraction = max(HELD_OUT, math.ceil(100 * MIN_HELD_OUT / n) / 100)
    return fraction, held_out_count(n, fraction)


def levels(size: int, kind: Kind) -> tuple[int, ...]:
    """Resolutions from ``size`` down to 8 px (4 px at 32 px and below on a GPU, DDPM's CIFAR-10 net)."""
    lowest = 4 if kind == "gpu" and size <= 32 else 8
    out = [size]
    while out[-1] % 2 == 0 and out[-1] // 2 >= lowest:
        out.append(out[-1] // 2)
    return tuple(out)


def network_shape(size: int, kind: Kind) -> tuple[int, tuple[int, ...], int, tuple[int, ...]]:
    """(base channels, channel_mult, residual blocks, attention resolutions). GPU: the bikes spec's
    DDPM-CIFAR network (128 channels, [1, 2, 2, 2], 2 blocks, attention at 16 px), one more full-width
    level per doubling above 64 px, so the parameters (~36M) stay what the bikes photos support. CPU:
    the quickstart's network (32 channels, [1, 2], 1 block), one level more per doubling above 16 px;
    the middle block's attention already sees the whole image."""
    res = levels(size, kind)
    if kind == "cpu":
        return 32, (1,) + (2,) * (len(res) - 1), 1, ()
    n = len(res)
    mult = (1, 2, 2, 2)[:n] if n <= 4 else (1,) * (n - 4) + (1, 2, 2, 2)
    attention = (min(res[1:], key=lambda r: abs(r - 16)),) if n > 1 else ()
    return 128, mult, 2, attention


def estimate_network(size: int, kind: Kind, num_classes: int) -> Network:
    """The network's parameters and the doctor's memory count of a training step, measured on the
    meta device (shapes only: no memory, no arithmetic, a fraction of a second at any size)."""
    base, mult, blocks, attention = network_shape(size, kind)
    cfg = TrainConfig(base_channels=base, channel_mult=mult, num_res_blocks=blocks, attention_resolutions=attention)
    info = info_for(cfg, channels=3, image_size=size, num_classes=num_classes)
    counts = []
    with torch.device("meta"):
        net = network_for(cfg, info)
        for batch in (FIXED_BATCH, FIXED_BATCH + 1):
            x, t = torch.empty(batch, 3, size, size), torch.empty(batch)
            labels = torch.zeros(batch, dtype=torch.long) if info.conditional else None
            with saved_bytes() as saved:
                net(x, t, labels).square().mean()
            counts.append(saved[0])
    return Network(
        base, mult, blocks, attention, count_parameters(net), state_bytes(net), counts[0], counts[1] - counts[0], size
    )


def batch_sizes(net: Network, machine: Machine, n_train: int) -> tuple[int, ...]:
    """The largest power of two that fits :data:`HEADROOM` of the memory (and the training set, and :data:`MAX_BATCH`),
    with its half and quarter: the shipped specs' [32, 64, 128] pattern."""
    room = HEADROOM * machine.memory_bytes
    if net.need(1) > room:
        raise HpoError(
            f"the {net.top} px network needs ~{net.need(1) / 2**30:.1f} GiB at batch size 1, more than "
            f"{HEADROOM:.0%} of {machine.words}; pass a smaller --image-size"
        )
    largest = 1
    while 2 * largest <= min(MAX_BATCH, n_train) and net.need(2 * largest) <= room:
        largest *= 2
    return tuple(sorted({max(1, largest >> k) for k in (2, 1, 0)}))


def round_down(x: float) -> float:
    """Two significant digits, rounded down (730 of 731.25)."""
    step = 10.0 ** (math.floor(math.log10(x)) - 1)
    return round(math.floor(x / step + 1e-9) * step, 10)


def budget(n_train: int, size: int, kind: Kind, largest_batch: int) -> Budget:
    """A trial trains 1/MAX_EXTRAPOLATION of the data-budget rule's kimg, so the winner's real run
    (target) is as far as ``hpo confirm`` forecasts; on a CPU also no more than the quickstart's trial
    costs (its kimg at 16 px, scaled by pixels). A step of its own for every evaluation point: on a
    GPU (40 trials) 5 doubling ones, where the rung at 1/8 prunes (docs/benchmarks.md "Pruners");
    on a CPU (10 trials) 4 even ones, where the median does."""
    num_evals, spacing = POINTS[kind]
    supported = supported_kimg(n_train)
    kimg = supported / MAX_EXTRAPOLATION
    if kind == "cpu":
        kimg = min(kimg, CPU_KIMG_AT_16 * (16 / size) ** 2)
    kimg = round_down(max(kimg, min_eval_steps(num_evals, spacing) * largest_batch / 1000))
    return Budget(kimg, round(MAX_EXTRAPOLATION * kimg, 10), supported, num_evals, spacing)


def scoring(num_classes: int, weights_present: bool, kind: Kind) -> Scoring:
    """Inception FID where clean-fid's weights are here (or where nothing else can score: the feature
    classifier needs 2 classes), else classifier-FID; samples: the first power of two above the
    feature dimensions (FID's covariance is singular at fewer), a quarter of them in the screen; with
    classifier features every combination is scored on ``CLASSIFIER_SAMPLES``."""
    features: Literal["inception", "classifier"] = "inception" if weights_present or num_classes < 2 else "classifier"
    dims = feature_dim(features, 3)
    n = 2 ** math.ceil(math.log2(dims + 1))
    full = CLASSIFIER_SAMPLES if features == "classifier" else n
    return Scoring(features, dims, full, n // 4, 250 if kind == "gpu" else 64, RESCORE_TOP, weights_present)


def screen_if_it_pays(scoring: Scoring, search: SearchPlan, conditional: bool) -> Scoring:
    """``scoring`` with its screen where the screen saves at least :data:`SCREEN_PAYS` of the sweep's
    worst-case evaluations, else with none (every combination completed): on the shipped grids its
    finalists (the best 3, each guidance scale's best, its frontier) may be every combination."""
    sweep = SamplingSweep(
        guidance_scale=search.guidance, steps=search.steps, sampler=(search.sampler,),
        spacing=(search.spacing,), screen_samples=scoring.screen_samples, rescore_top=scoring.rescore_top,
    )  # fmt: skip
    if sweep.screen_saving(scoring.num_samples, conditional=conditional) >= SCREEN_PAYS:
        return scoring
    return dataclasses.replace(scoring, screen_samples=0)


def search_plan(net: Network, batches: tuple[int, ...], kind: Kind, conditional: bool) -> SearchPlan:
    """The shipped specs' ranges: bikes' for a large network (lr to 1e-3), the quickstart's for a small one."""
    large = net.parameters >= LARGE_NETWORK
    gpu = kind == "gpu"
    return SearchPlan(
        lr=(5e-5, 1e-3) if large else (1e-4, 3e-2),
        batch_sizes=batches,
        timesteps=(250, 500, 1000, 2000) if gpu else (100, 250, 500, 1000),
        schedules=("linear", "cosine", "sigmoid"),
        guidance=((1.0, 1.5, 2.5, 4.0) if gpu else (1.0, 2.0, 3.0)) if conditional else (1.0,),
        # Small CPU networks: DPM-Solver++(2M) on EDM's spacing within 20 evaluations beat DDIM's best of
        # 10/20/30 steps on 13 of 18 trained 16-px models and lost on 1 (benchmarks/sampler_frontier.py); GPU
        # specs (64 px and up, Inception) keep DDIM, where no benchmark has compared them.
        steps=(25, 50, 100) if gpu else (5, 10),
        sampler="ddim" if gpu else "dpmpp_2m",
        spacing="trailing" if gpu else "karras",
    )


def plan_spec(
    survey: FolderSurvey, machine: Machine, *, name: str, image_size: int | None, weights_present: bool
) -> Plan:
    size = choose_image_size(survey, image_size)
    fraction, n_val = held_out(survey.num_images)
    n_train = survey.num_images - n_val
    conditional = survey.num_classes > 1
    net = estimate_network(size, machine.kind, survey.num_classes if conditional else 0)
    batches = batch_sizes(net, machine, n_train)
    search = search_plan(net, batches, machine.kind, conditional)
    return Plan(
        name=name, survey=survey, machine=machine, image_size=size, size_share=survey.share_at_least(size),
        chosen_size=image_size is None, val_fraction=fraction, n_train=n_train, n_val=n_val,
        conditional=conditional, network=net, budget=budget(n_train, size, machine.kind, batches[-1]),
        scoring=screen_if_it_pays(scoring(survey.num_classes, weights_present, machine.kind), search, conditional),
        search=search,
        n_trials=40 if machine.kind == "gpu" else 10,
    )  # fmt: skip


def epochs(kimg: float, n_train: int) -> float:
    return kimg * 1000 / n_train
