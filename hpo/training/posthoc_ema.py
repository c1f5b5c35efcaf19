"""Post-hoc EMA (Karras et al. 2024, "Analyzing and Improving the Training Dynamics of Diffusion
Models", §3 and appendix C): any EMA length, chosen after training, from a few stored snapshots.

During training a few *power-function* EMAs are tracked: at optimizer step t the average moves
towards the weights by 1 − β_t with β_t = (1 − 1/t)^(γ+1). Its weight on the weights of step τ ≤ t
is exactly (τ^(γ+1) − (τ−1)^(γ+1)) / t^(γ+1) — a profile that grows like τ^γ — and its length is
σ_rel, the profile's standard deviation relative to t. A snapshot of such an EMA at step t is that
profile applied to the training trajectory. Any other profile (another σ_rel, at the last step) is
approximated by the combination of stored snapshots whose profiles best match it in least squares;
the same coefficients combine the snapshots' weights. We solve on the exact discrete profiles
rather than the paper's continuous ones, so a target that lies in the snapshots' span is recovered
exactly (up to the snapshots' fp16 rounding). Written from the paper; no code taken from EDM2.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from hpo.spec.rules import check_sigma_rel
from hpo.training.checkpoint import atomic_save
from hpo.training.model import DiffusionModel

SNAPSHOT_NAME = re.compile(r"ema-([0-9.e-]+)-(\d{9})\.pt")  # ema-{σ_rel}-{step}.pt


def sigma_rel_to_gamma(sigma_rel: float) -> float:
    """γ of the power-function EMA whose relative standard deviation is ``sigma_rel``: the largest
    real root of γ³ + 7γ² + (16 − σ⁻²)γ + (12 − σ⁻²) = 0 (from σ_rel² = (γ+1) / ((γ+2)²(γ+3)))."""
    check_sigma_rel(sigma_rel, "sigma_rel")
    t = sigma_rel**-2
    roots = torch.linalg.eigvals(
        torch.tensor([[-7.0, t - 16.0, t - 12.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    )
    return float(max(r.real for r in roots if abs(float(r.imag)) < 1e-9))


def gamma_to_sigma_rel(gamma: float) -> float:
    return math.sqrt((gamma + 1) / ((gamma + 2) ** 2 * (gamma + 3)))


def power_beta(step: int, gamma: float) -> float:
    """β at optimizer step ``step`` (1-based): step 1 copies the weights, later steps average."""
    return (1.0 - 1.0 / step) ** (gamma + 1.0)


def profile(step: int, gamma: float, length: int) -> torch.Tensor:
    """Weights (float64, ``length`` long) that the power EMA at ``step`` puts on steps 1..length."""
    tau = torch.arange(1, length + 1, dtype=torch.float64)
    inside = tau <= step
    w = (tau.pow(gamma + 1) - (tau - 1).pow(gamma + 1)) / float(step) ** (gamma + 1)
    return torch.where(inside, w, torch.zeros_like(w))


@dataclass(frozen=True)
class Fit:
    coefficients: list[float]  # one per snapshot, in the snapshots' order
    residual: float  # ‖fitted − target profile‖ / ‖target profile‖: 0 when the target is in the span


def solve(snapshots: Sequence[tuple[int, float]], target_step: int, target_gamma: float) -> Fit:
    """Least-squares coefficients that combine snapshots (step, γ) into the power EMA of
    ``target_gamma`` at ``target_step``."""
    length = max(target_step, *(s for s, _ in snapshots))
    basis = torch.stack([profile(s, g, length) for s, g in snapshots], dim=1)
    target = profile(target_step, target_gamma, length)
    x = torch.linalg.lstsq(basis, target[:, None], driver="gelsd").solution[:, 0]
    residual = float(torch.linalg.vector_norm(basis @ x - target) / torch.linalg.vector_norm(target))
    return Fit([float(v) for v in x], residual)


class PowerEmas:
    """The tracked power-function EMAs of one training run (one copy of the network each)."""

    def __init__(self, model: nn.Module, sigma_rels: Sequence[float]) -> None:
        self.sigma_rels = tuple(sigma_rels)
        self.gammas = [sigma_rel_to_gamma(s) for s in self.sigma_rels]
        self.modules = [copy.deepcopy(model).eval().requires_grad_(False) for _ in self.sigma_rels]

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        params: list[torch.Tensor] = list(model.parameters())
        for ema, gamma in zip(self.modules, self.gammas, strict=True):
            torch._foreach_lerp_(list(ema.parameters()), params, 1.0 - power_beta(step, gamma))

    def state(self) -> list[dict[str, torch.Tensor]]:
        return [m.state_dict() for m in self.modules]

    def load_state(self, states: Sequence[dict[str, torch.Tensor]]) -> None:
        for module, state in zip(self.modules, states, strict=True):
            module.load_state_dict(state)

    def save_snapshots(self, folder: Path, step: int) -> list[Path]:
        """Each profile's weights at ``step``, in fp16, one file per profile (rewritten, not added,
        when a resumed run passes the same step again)."""
        paths = []
        for module, sigma_rel in zip(self.modules, self.sigma_rels, strict=True):
            state = {k: v.detach().to("cpu", torch.float16) if v.is_floating_point() else v.detach().cpu()
                     for k, v in module.state_dict().items()}  # fmt: skip
            path = folder / f"ema-{sigma_rel!r}-{step:09d}.pt"
            atomic_save(state, path)
            paths.append(path)
        return paths


@dataclass(frozen=True)
class Snapshot:
    path: Path
    step: int
    sigma_rel: float
    gamma: float


def list_snapshots(folder: Path) -> list[Snapshot]:
    """The snapshots stored in ``folder``, by step then profile."""
    found = []
    for path in folder.glob("ema-*.pt") if folder.is_dir() else []:
        if match := SNAPSHOT_NAME.fullmatch(path.name):
            sigma_rel = float(match[1])
            found.append(Snapshot(path, int(match[2]), sigma_rel, sigma_rel_to_gamma(sigma_rel)))
    return sorted(found, key=lambda s: (s.step, s.gamma))


def combine(snapshots: Sequence[Snapshot], coefficients: Iterable[float]) -> dict[str, torch.Tensor]:
    """Σ cᵢ · weightsᵢ in float32 (integer buffers from the last snapshot)."""
    out: dict[str, torch.Tensor] = {}
    for snap, c in zip(snapshots, coefficients, strict=True):
        state = torch.load(snap.path, map_location="cpu", weights_only=True)
        for key, value in state.items():
            if not value.is_floating_point():
                out[key] = value
            elif key in out:
                out[key].add_(value.float(), alpha=c)
            else:
                out[key] = value.float() * c
    return out


class PosthocEma:
    """The EMA weights of a finished run at any σ_rel, rebuilt from its snapshots. Holds one rebuilt
    network at a time (the last asked for)."""

    def __init__(self, base: DiffusionModel, folder: Path, *, upto: int | None = None) -> None:
        """``upto``: rebuild the EMA as it was at that step (an evaluation point) from the snapshots
        taken until then; default the last."""
        self.base, self.folder = base, folder
        self.snapshots = [s for s in list_snapshots(folder) if upto is None or s.step <= upto]
        if not self.snapshots:
            raise FileNotFoundError(f"no EMA snapshots in {folder}: train with train.ema_profiles set")
        self.step = upto or max(s.step for s in self.snapshots)
        self._cached: tuple[float, DiffusionModel] | None = None
        self._fits: dict[float, Fit] = {}

    def fit(self, sigma_rel: float) -> Fit:
        """The least-squares coefficients for ``sigma_rel``, solved once per length."""
        if sigma_rel not in self._fits:
            profiles = [(s.step, s.gamma) for s in self.snapshots]
            self._fits[sigma_rel] = solve(profiles, self.step, sigma_rel_to_gamma(sigma_rel))
        return self._fits[sigma_rel]

    def weights(self, sigma_rel: float) -> dict[str, torch.Tensor]:
        return combine(self.snapshots, self.fit(sigma_rel).coefficients)

    def model(self, sigma_rel: float | None) -> DiffusionModel:
        """The network with the EMA of ``sigma_rel`` (None: the run's own EMA)."""
        if sigma_rel is None:
            return self.base
        if self._cached is None or self._cached[0] != sigma_rel:
            self._cached = None  # free the previous network before building the next
            net = copy.deepcopy(self.base.net)
            net.load_state_dict(self.weights(sigma_rel))
            self._cached = (sigma_rel, DiffusionModel(net, self.base.info, self.base.schedule, self.base.prediction))
        return self._cached[1]

    @property
    def disk_bytes(self) -> int:
        return sum(s.path.stat().st_size for s in self.snapshots)
