"""Configurations that cannot train a usable model, refused before any training: the one rule shared
by ``hpo doctor`` (which names the broken corners of a search space) and the objective (which ends
such a trial at once, at no cost, with reason ``invalid_schedule``)."""

from __future__ import annotations

from hpo.diffusion.schedule import NoiseSchedule
from hpo.spec.config import TrainConfig
from hpo.training.trainer import make_schedule

TERMINAL_WARN, TERMINAL_FAIL = 1e-3, 2e-2  # ᾱ at t = T−1 (log-SNR −6.9 and −3.9)


def schedule_label(cfg: TrainConfig) -> str:
    """``linear literal betas 0.001→0.02 T=250``: every setting that moves the schedule's ends."""
    betas = ""
    if cfg.schedule == "linear":
        kind = "literal" if cfg.beta_scaling == "none" else "scaled"
        betas = f" {kind} betas {cfg.beta_start:g}→{cfg.beta_end:g}"
    return f"{cfg.schedule}{betas} T={cfg.timesteps}" + (" zero terminal SNR" if cfg.zero_terminal_snr else "")


def terminal_alpha_bar(schedule: NoiseSchedule) -> float:
    return float(schedule.alphas_cumprod[-1])


def schedule_refusal(cfg: TrainConfig) -> str | None:
    """Why ``cfg``'s schedule would leave samples grey (training never reaches pure noise, sampling
    starts there), or None when it is usable."""
    schedule = make_schedule(cfg)
    abar = terminal_alpha_bar(schedule)
    if abar <= TERMINAL_FAIL:
        return None
    return (
        f"{schedule_label(cfg)}: ᾱ at the last step is {abar:.3g} (log-SNR {float(schedule.log_snr[-1]):.2f}), "
        f"above {TERMINAL_FAIL:g}: training never reaches pure noise but sampling starts from it"
    )
