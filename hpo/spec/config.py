"""Typed, frozen settings of a training run: data, network, trainer and scoring.

Every hyperparameter that training uses is a field of :class:`TrainConfig`; how a trained model is
sampled lives apart in :class:`hpo.spec.sampling.SamplingConfig`. Search spaces only choose values
for these fields. Values far beyond any real run are refused before anything allocates.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hpo.errors import ConfigError
from hpo.spec.rules import (
    MAX_DOUBLING_EVALS,
    MAX_SCHEDULE_SHIFT,
    EvalSpacing,
    check_budget,
    check_sigma_rel,
    eval_fractions,
    require,
    steps_in_budget,
)

Schedule = Literal["linear", "cosine", "sigmoid"]
BetaScaling = Literal["scaled", "none"]
Prediction = Literal["eps", "v", "x0"]
Weighting = Literal["uniform", "min_snr"]
LrSchedule = Literal["constant", "cosine", "linear", "wsd"]
POSTHOC_PROFILES = (0.05, 0.10)  # the power EMAs tracked for a swept EMA length (EDM2's defaults)
Features = Literal["inception", "classifier"]
Parameterization = Literal["standard", "mup"]

TORCHVISION_DATASETS = ("CIFAR10", "CIFAR100", "MNIST", "FashionMNIST", "SVHN")
MAX_IMAGE_SIZE = 1024
DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")
FACTORY = re.compile(r"builtin|diffusers|[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def cache_root() -> Path:
    """Where derived data is cached when a spec does not say: $XDG_CACHE_HOME/hpo, else ~/.cache/hpo.
    Shared by every checkout, so reference statistics are computed once per machine."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "hpo"


def within(value: float, low: float, high: float, key: str) -> None:
    require(low <= value <= high, key, f"must be in [{low:g}, {high:g}], got {value}")


@dataclass(frozen=True)
class DataConfig:
    source: str = "digits"  # folder | digits | shapes | torchvision:NAME (CIFAR10, MNIST, ...)
    path: str | None = None  # image folder (folder) or download root (torchvision:NAME)
    image_size: int = 16  # square side in pixels after resize + centre crop
    val_fraction: float = 0.1  # held-out share for the validation metric and FID reference
    split_seed: int = 0  # the train/validation split is a pure function of this seed
    num_images: int = 2000  # shapes only: how many images to generate
    max_images: int | None = None  # use at most this many images (after a seeded shuffle)
    cache_dir: str | None = None  # preprocessed uint8 tensors and scoring caches; None: cache_root()

    def __post_init__(self) -> None:
        within(self.image_size, 8, MAX_IMAGE_SIZE, "image_size")
        require(0.0 < self.val_fraction < 0.9, "val_fraction", f"must be in (0, 0.9), got {self.val_fraction}")
        within(self.num_images, 10, 1_000_000, "num_images")
        if self.max_images is not None:
            require(self.max_images >= 10, "max_images", f"must be at least 10, got {self.max_images}")
        if self.source == "folder":
            require(bool(self.path), "path", "source 'folder' needs data.path: the folder of images")
        elif self.source.startswith("torchvision:"):
            name = self.source.split(":", 1)[1]
            require(
                name in TORCHVISION_DATASETS,
                "source",
                f"unknown torchvision dataset {name!r}; expected one of {', '.join(TORCHVISION_DATASETS)}",
            )
        elif self.source not in ("digits", "shapes"):
            raise ConfigError(
                "source", f"unknown source {self.source!r}; expected folder, digits, shapes or torchvision:NAME"
            )

    @property
    def cache_path(self) -> Path:
        return Path(self.cache_dir).expanduser() if self.cache_dir else cache_root()


@dataclass(frozen=True)
class NetworkConfig:
    factory: str = "builtin"  # builtin (our UNet: the train fields below), diffusers, or "package.module:function"
    kwargs: dict[str, Any] = field(default_factory=dict)  # keyword arguments for the factory; search as network.NAME

    def __post_init__(self) -> None:
        require(
            bool(FACTORY.fullmatch(self.factory)),
            "factory",
            f"{self.factory!r} is not builtin, diffusers or an importable 'package.module:function'",
        )
        require(
            self.factory != "builtin" or not self.kwargs,
            "kwargs",
            "the builtin UNet takes its settings from train (base_channels, channel_mult, ...), not kwargs",
        )


@dataclass(frozen=True)
class TrainConfig:
    # budget
    kimg: float = 10.0  # thousands of training images seen; batch sizes compete on equal data
    num_evals: int = 4  # K validation points (the pruners decide at each), spaced by eval_spacing
    eval_spacing: EvalSpacing = "even"  # even: at 1/K, 2/K, ..., 1; doubling: at 1/2^(K-1), ..., 1/4, 1/2, 1
    # diffusion process
    timesteps: int = 1000  # T, number of discrete noise levels
    schedule: Schedule = "linear"  # linear (Ho et al.), cosine (Nichol & Dhariwal), sigmoid (Jabri et al.)
    beta_start: float = 1e-4  # linear schedule: first beta (at T=1000 when beta_scaling is scaled)
    beta_end: float = 0.02  # linear schedule: last beta (at T=1000 when beta_scaling is scaled)
    beta_scaling: BetaScaling = "scaled"  # scaled: range given at T=1000, times 1000/T; none: literally over T
    zero_terminal_snr: bool = False  # rescale so the last step is pure noise (Lin et al. 2024)
    schedule_shift: float = 0.0  # added to every step's log-SNR (Hoogeboom et al. 2023): 2·ln(64/d) at d px
    prediction: Prediction = "eps"  # what the network predicts: eps, v or x0
    loss_weighting: Weighting = "uniform"  # uniform, or min_snr (Hang et al. 2023)
    min_snr_gamma: float = 5.0  # gamma of min-SNR weighting
    # optimisation
    lr: float = 2e-4  # AdamW learning rate after warm-up
    batch_size: int = 64  # images per step
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    weight_decay: float = 0.0
    warmup_kimg: float = 0.0  # linear learning-rate warm-up, in thousands of images
    lr_schedule: LrSchedule = "cosine"  # after warm-up: cosine / linear decay to lr_floor at the end, constant, or wsd
    lr_floor: float = 0.1  # cosine / linear / wsd: the final lr as a share of lr
    cooldown_share: float = 0.2  # wsd: the last share of the budget's steps, a 1 − sqrt decay (Hägele et al. 2024)
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    ema_halflife_kimg: float = 0.5  # EMA half-life in thousands of images (EDM)
    ema_rampup: float = 0.05  # EMA warm-up: half-life at most this share of images seen; 0 disables
    ema_profiles: tuple[float, ...] = ()  # post-hoc EMA: σ_rel of tracked power EMAs (set by sampling.ema_sigma_rel)
    ema_snapshots: int = 16  # post-hoc EMA: snapshots of each profile, evenly spaced over the budget
    hflip: bool = False  # random horizontal flips (not for digits or text)
    diverge_factor: float = 10.0  # stop as 'diverged' when the loss exceeds this × its running median
    # network
    network: NetworkConfig = NetworkConfig()  # builtin UNet (below) or a user factory
    base_channels: int = 32  # builtin UNet: channels at the first resolution
    channel_mult: tuple[int, ...] = (1, 2, 2)  # builtin UNet: channel multiplier per resolution level
    num_res_blocks: int = 1  # builtin UNet: residual blocks per level
    attention_resolutions: tuple[int, ...] = ()  # builtin UNet: feature-map sizes with self-attention, e.g. [8]
    dropout: float = 0.1  # builtin UNet: dropout in residual blocks
    parameterization: Parameterization = "standard"  # builtin UNet: standard, or mup (lr transfers across width)
    mup_base_channels: int = 32  # mup: the width at which it equals standard; lr etc. are tuned for it
    conditional: bool = True  # class-conditional when the data has several classes
    p_uncond: float = 0.1  # label dropout, trains the null class for classifier-free guidance
    # runtime
    seed: int = 0  # weights, batches, noise
    device: str = "auto"  # auto (cuda when present), cpu, cuda, cuda:N
    compile: bool = False  # torch.compile the network (CUDA)
    val_images: int = 256  # held-out images used by the validation metric
    val_noise_levels: int = 7  # log-SNR grid points of the validation metric (-6 .. 6)

    def __post_init__(self) -> None:
        within(self.kimg, 1e-3, 1e6, "kimg")
        within(self.lr, 1e-12, 100.0, "lr")
        within(self.timesteps, 2, 100_000, "timesteps")
        within(self.batch_size, 1, 65_536, "batch_size")
        within(self.num_evals, 1, 1000 if self.eval_spacing == "even" else MAX_DOUBLING_EVALS, "num_evals")
        within(self.base_channels, 1, 4096, "base_channels")
        within(self.val_images, 1, 100_000, "val_images")
        within(self.val_noise_levels, 1, 64, "val_noise_levels")
        require(
            0.0 < self.beta_start < self.beta_end < 1.0,
            "beta_start",
            f"need 0 < beta_start < beta_end < 1, got beta_start={self.beta_start}, beta_end={self.beta_end}",
        )
        require(0.0 <= self.p_uncond < 1.0, "p_uncond", f"must be in [0, 1), got {self.p_uncond}")
        require(0.0 <= self.dropout < 1.0, "dropout", f"must be in [0, 1), got {self.dropout}")
        require(self.grad_clip >= 0.0, "grad_clip", f"must be >= 0, got {self.grad_clip}")
        require(self.warmup_kimg >= 0.0, "warmup_kimg", f"must be >= 0, got {self.warmup_kimg}")
        within(self.lr_floor, 0.0, 1.0, "lr_floor")
        require(0.0 < self.cooldown_share <= 1.0, "cooldown_share", f"must be in (0, 1], got {self.cooldown_share}")
        require(self.ema_halflife_kimg > 0.0, "ema_halflife_kimg", f"must be positive, got {self.ema_halflife_kimg}")
        require(self.ema_rampup >= 0.0, "ema_rampup", f"must be >= 0, got {self.ema_rampup}")
        for i, sigma_rel in enumerate(self.ema_profiles):
            check_sigma_rel(sigma_rel, f"ema_profiles[{i}]")
        require(
            len(set(self.ema_profiles)) == len(self.ema_profiles) <= 4,
            "ema_profiles",
            f"needs at most 4 distinct σ_rel values, got {list(self.ema_profiles)}",
        )
        within(self.ema_snapshots, 2, 256, "ema_snapshots")
        require(self.diverge_factor > 1.0, "diverge_factor", f"must be > 1, got {self.diverge_factor}")
        require(self.min_snr_gamma > 0.0, "min_snr_gamma", f"must be positive, got {self.min_snr_gamma}")
        require(1 <= len(self.channel_mult) <= 8, "channel_mult", f"needs 1 to 8 levels, got {self.channel_mult}")
        require(
            all(0 < m <= 64 for m in self.channel_mult), "channel_mult", f"must be in 1..64, got {self.channel_mult}"
        )
        within(self.num_res_blocks, 1, 16, "num_res_blocks")
        within(self.mup_base_channels, 1, 4096, "mup_base_channels")
        require(
            self.parameterization == "standard" or self.network.factory == "builtin",
            "parameterization",
            f"mup is built for the builtin UNet; network.factory {self.network.factory!r} needs parameterization: "
            "standard (or its own µP)",
        )
        require(bool(DEVICE.fullmatch(self.device)), "device", f"{self.device!r}: expected auto, cpu, cuda or cuda:N")
        require(
            not (self.zero_terminal_snr and self.prediction == "eps"),
            "zero_terminal_snr",
            "needs prediction: v (or x0): at the last step ᾱ = 0 and x0 cannot be recovered from ε (Lin et al. 2024)",
        )
        require(
            abs(self.schedule_shift) <= MAX_SCHEDULE_SHIFT,
            "schedule_shift",
            f"must be a log-SNR shift within ±{MAX_SCHEDULE_SHIFT:g} (2·ln(64/d) for d-px images: −1.39 at 128), "
            f"got {self.schedule_shift}",
        )
        check_budget(self.kimg, self.batch_size, self.num_evals, self.eval_spacing)

    @property
    def total_steps(self) -> int:
        return steps_in_budget(self.kimg, self.batch_size)

    def eval_fractions(self) -> tuple[float, ...]:
        """Shares of the budget at which evaluation k = 1..K runs."""
        return eval_fractions(self.num_evals, self.eval_spacing)

    def eval_steps(self) -> list[int]:
        """Steps after which evaluation k = 1..K runs: fixed fractions of the budget (even ones in
        integer arithmetic, as every stored run computed them; doubling ones are exact powers of 2)."""
        if self.eval_spacing == "even":
            return [max(1, round(self.total_steps * k / self.num_evals)) for k in range(1, self.num_evals + 1)]
        return [max(1, round(self.total_steps * f)) for f in self.eval_fractions()]

    def snapshot_steps(self) -> list[int]:
        """Steps after which the post-hoc EMA profiles are saved (none without ``ema_profiles``)."""
        if not self.ema_profiles:
            return []
        count = min(self.ema_snapshots, self.total_steps)
        even = {max(1, round(self.total_steps * k / count)) for k in range(1, count + 1)}
        return sorted(even | set(self.eval_steps()))  # the evaluation points can rebuild any EMA too

    def replace(self, **changes: object) -> TrainConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ScoreConfig:
    features: Features = "inception"  # inception (standard FID) or classifier (trained on the data)
    num_samples: int = 1000  # generated images per scored combination; compare FIDs only at equal counts
    batch_size: int = 250  # sampling batch
    grid_size: int = 64  # images in the saved sample grid
    weights: str | None = None  # Inception weights file ($HPO_FID_WEIGHTS wins; else ~/.cache/hpo)

    def __post_init__(self) -> None:
        within(self.num_samples, 2, 200_000, "num_samples")
        within(self.batch_size, 1, 65_536, "batch_size")
        within(self.grid_size, 1, 1024, "grid_size")

    @property
    def metric_name(self) -> str:
        """What every report, log and table calls the score."""
        return metric_name(self.features)


def metric_name(features: str) -> str:
    return "classifier-FID" if features == "classifier" else "FID"
