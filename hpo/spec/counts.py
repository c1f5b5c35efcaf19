"""Whether a spec's sample counts make its statistics well-posed for its feature space.

FID estimates a d-dimensional covariance from n samples: with n ≤ d it is singular, and the score's
bias, which grows with the samples' own spread, decides the ranking (64 samples in 143 dimensions
ranked the three worst guidance settings first; ``benchmarks/screen_agreement.py``). KID is unbiased
at any n ≥ 2. The spec check refuses an FID screen that is ill-posed; a full count at or below the
dimension is a warning at launch and in ``hpo doctor`` (small counts keep tests and smoke runs cheap).
"""

from __future__ import annotations

from dataclasses import dataclass

INCEPTION_FEATURES = 2048  # clean-fid's pool3 features
CLASSIFIER_FEATURES = 128  # the data classifier's penultimate layer ...
IMAGE_STATISTICS = 5  # ... plus this many image statistics per channel
GREY_SOURCES = ("digits", "torchvision:MNIST", "torchvision:FashionMNIST")  # every other source is read as RGB


def source_channels(source: str) -> int:
    return 1 if source in GREY_SOURCES else 3


def feature_dim(features: str, channels: int) -> int:
    """Dimensions of the space FID and KID are computed in."""
    if features == "inception":
        return INCEPTION_FEATURES
    return CLASSIFIER_FEATURES + IMAGE_STATISTICS * channels


@dataclass(frozen=True)
class CountProblem:
    key: str
    message: str
    fatal: bool  # refused by the spec check; else a warning


def count_problems(
    *, features: str, channels: int, num_samples: int, screen_samples: int, screen_by: str, combinations: int
) -> list[CountProblem]:
    """The sample counts that leave a statistic ill-posed, each with the numbers and the fix."""
    d = feature_dim(features, channels)
    space = f"the {d} dimensions of {features} features"
    out = []
    screening = 0 < screen_samples < num_samples and combinations > 1
    if screening and screen_by == "fid" and screen_samples <= d:
        out.append(CountProblem(
            "sampling.screen_samples",
            f"{screen_samples} samples are not more than {space}: FID's covariance is singular there and ranks "
            f"low-diversity settings first; screen with screen_by: kid (unbiased at any count) or use at least {d + 1}",
            fatal=True,
        ))  # fmt: skip
    if screening and screen_by == "kid" and screen_samples < 2:
        out.append(CountProblem("sampling.screen_samples", "KID needs at least 2 samples", fatal=True))
    if num_samples <= d:
        out.append(CountProblem(
            "score.num_samples",
            f"{num_samples} samples are not more than {space}: every trial's FID is rank-deficient and favours "
            f"low-diversity samples; use at least {d + 1}",
            fatal=False,
        ))  # fmt: skip
    return out
