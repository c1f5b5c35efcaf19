"""Typed, frozen settings of a training run: data, trainer and scoring.

Every hyperparameter the service can search is a field of :class:`TrainConfig`; search spaces
(``hpo/spec.py``) only choose values for these fields.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from hpo.errors import ConfigError

Schedule = Literal["linear", "cosine", "sigmoid"]
Prediction = Literal["eps", "v", "x0"]
Weighting = Literal["uniform", "min_snr"]
Features = Literal["inception", "classifier"]


def require(ok: bool, key: str, message: str) -> None:
    """Validation where values enter: ``message`` should echo the offending value."""
    if not ok:
        raise ConfigError(key, message)


@dataclass(frozen=True)
class DataConfig:
    source: str = "digits"  # folder | digits | shapes | torchvision:NAME (CIFAR10, MNIST, ...)
    path: str | None = None  # image folder (folder) or download root (torchvision:NAME)
    image_size: int = 16  # square side in pixels after resize + centre crop
    val_fraction: float = 0.1  # held-out share for the validation metric and FID reference
    split_seed: int = 0  # the train/validation split is a pure function of this seed
    num_images: int = 2000  # shapes only: how many images to generate
    max_images: int | None = None  # use at most this many images (after a seeded shuffle)
    cache_dir: str = ".hpo/cache"  # preprocessed uint8 tensors, keyed by content and options

    def __post_init__(self) -> None:
        require(self.image_size >= 8, "image_size", f"must be at least 8, got {self.image_size}")
        require(0.0 < self.val_fraction < 0.9, "val_fraction", f"must be in (0, 0.9), got {self.val_fraction}")
        require(self.num_images >= 10, "num_images", f"must be at least 10, got {self.num_images}")
        if self.source == "folder":
            require(bool(self.path), "path", "source 'folder' needs data.path: the folder of images")
        elif self.source not in ("digits", "shapes") and not self.source.startswith("torchvision:"):
            raise ConfigError(
                "source", f"unknown source {self.source!r}; expected folder, digits, shapes or torchvision:NAME"
            )


@dataclass(frozen=True)
class TrainConfig:
    # budget
    kimg: float = 10.0  # thousands of training images seen; batch sizes compete on equal data
    num_evals: int = 4  # K validation points at 1/K, 2/K, ..., K/K of the budget
    # diffusion process
    timesteps: int = 1000  # T, number of discrete noise levels
    schedule: Schedule = "linear"  # linear (Ho et al.), cosine (Nichol & Dhariwal), sigmoid (Jabri et al.)
    beta_start: float = 1e-4  # linear schedule: first beta at T=1000 (scaled by 1000/T)
    beta_end: float = 0.02  # linear schedule: last beta at T=1000 (scaled by 1000/T)
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
    grad_clip: float = 1.0  # max global gradient norm; 0 disables clipping
    ema_halflife_kimg: float = 0.5  # EMA half-life in thousands of images (EDM)
    ema_rampup: float = 0.05  # EMA warm-up: half-life at most this share of images seen; 0 disables
    hflip: bool = False  # random horizontal flips (not for digits or text)
    diverge_factor: float = 10.0  # stop as 'diverged' when the loss exceeds this × its running median
    # network
    base_channels: int = 32  # channels at the first resolution
    channel_mult: tuple[int, ...] = (1, 2, 2)  # channel multiplier per resolution level
    num_res_blocks: int = 1  # residual blocks per level
    attention_resolutions: tuple[int, ...] = ()  # feature-map sizes with self-attention, e.g. [8]
    dropout: float = 0.1
    conditional: bool = True  # class-conditional when the data has several classes
    p_uncond: float = 0.1  # label dropout, trains the null class for classifier-free guidance
    # sampling
    guidance_scale: float = 1.0  # classifier-free guidance w; 1 = conditional model alone
    ddim_steps: int = 50  # DDIM sampling steps (trailing spacing)
    ddim_eta: float = 0.0  # 0 = deterministic DDIM, 1 = DDPM-like noise
    # runtime
    seed: int = 0  # weights, batches, noise
    device: str = "auto"  # auto (cuda when present), cpu, cuda, cuda:N
    compile: bool = False  # torch.compile the network (CUDA)
    val_images: int = 256  # held-out images used by the validation metric
    val_noise_levels: int = 7  # log-SNR grid points of the validation metric (-6 .. 6)

    def __post_init__(self) -> None:
        for key in ("kimg", "lr", "timesteps", "batch_size", "num_evals", "ddim_steps", "base_channels"):
            value = getattr(self, key)
            require(value > 0, key, f"must be positive, got {value}")
        require(self.timesteps >= 2, "timesteps", f"must be at least 2, got {self.timesteps}")
        require(
            self.ddim_steps <= self.timesteps,
            "ddim_steps",
            f"ddim_steps={self.ddim_steps} exceeds timesteps={self.timesteps}; DDIM visits a subset of the T steps",
        )
        require(
            0.0 < self.beta_start < self.beta_end < 1.0,
            "beta_start",
            f"need 0 < beta_start < beta_end < 1, got beta_start={self.beta_start}, beta_end={self.beta_end}",
        )
        require(0.0 <= self.p_uncond < 1.0, "p_uncond", f"must be in [0, 1), got {self.p_uncond}")
        require(0.0 <= self.dropout < 1.0, "dropout", f"must be in [0, 1), got {self.dropout}")
        require(self.guidance_scale >= 0.0, "guidance_scale", f"must be >= 0, got {self.guidance_scale}")
        require(self.ddim_eta >= 0.0, "ddim_eta", f"must be >= 0, got {self.ddim_eta}")
        require(self.grad_clip >= 0.0, "grad_clip", f"must be >= 0, got {self.grad_clip}")
        require(self.warmup_kimg >= 0.0, "warmup_kimg", f"must be >= 0, got {self.warmup_kimg}")
        require(self.ema_halflife_kimg > 0.0, "ema_halflife_kimg", f"must be positive, got {self.ema_halflife_kimg}")
        require(self.ema_rampup >= 0.0, "ema_rampup", f"must be >= 0, got {self.ema_rampup}")
        require(self.diverge_factor > 1.0, "diverge_factor", f"must be > 1, got {self.diverge_factor}")
        require(len(self.channel_mult) >= 1, "channel_mult", "needs at least one level")
        require(all(m > 0 for m in self.channel_mult), "channel_mult", f"must be positive, got {self.channel_mult}")
        require(self.num_res_blocks >= 1, "num_res_blocks", f"must be at least 1, got {self.num_res_blocks}")
        require(self.val_images >= 1, "val_images", f"must be at least 1, got {self.val_images}")
        require(self.val_noise_levels >= 1, "val_noise_levels", f"must be at least 1, got {self.val_noise_levels}")
        require(
            self.total_steps >= self.num_evals,
            "kimg",
            f"budget of {self.kimg} kimg at batch_size={self.batch_size} is {self.total_steps} steps, "
            f"fewer than num_evals={self.num_evals}; raise kimg or lower num_evals",
        )

    @property
    def total_steps(self) -> int:
        return max(1, math.ceil(self.kimg * 1000 / self.batch_size))

    def eval_steps(self) -> list[int]:
        """Steps after which evaluation k = 1..K runs: fixed fractions of the budget."""
        return [max(1, round(self.total_steps * k / self.num_evals)) for k in range(1, self.num_evals + 1)]

    def replace(self, **changes: object) -> TrainConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ScoreConfig:
    features: Features = "inception"  # inception (standard FID) or classifier (trained on the data)
    num_samples: int = 1000  # generated images per trial; compare FIDs only at equal counts
    batch_size: int = 250  # sampling batch
    grid_size: int = 64  # images in the saved sample grid
    weights: str | None = None  # Inception weights file (else $HPO_FID_WEIGHTS or the default path)

    def __post_init__(self) -> None:
        require(self.num_samples >= 2, "num_samples", f"must be at least 2, got {self.num_samples}")
        require(self.batch_size >= 1, "batch_size", f"must be positive, got {self.batch_size}")
        require(self.grid_size >= 1, "grid_size", f"must be positive, got {self.grid_size}")
