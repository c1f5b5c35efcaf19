"""Whether a spec's sample counts make its statistics well-posed for its feature space.

FID estimates a d-dimensional covariance from n samples: with n ≤ d it is singular, and the score's
bias, which grows with the samples' own spread, decides the ranking (64 samples in 143 dimensions
ranked the three worst guidance settings first). KID is unbiased at any n ≥ 2 but measures
something else than FID (it ranked photo patches' guidance scales differently). FID in the
reference's top n/4 principal components is well-posed at n and agreed with the full count on every
dataset measured (``benchmarks/screen_agreement.py``): the default screen. The spec check refuses an
ill-posed FID screen; a full count at or below the dimension is a warning at launch and in
``hpo doctor`` (small counts keep tests and smoke runs cheap).
"""

from __future__ import annotations

from dataclasses import dataclass

INCEPTION_FEATURES = 2048  # clean-fid's pool3 features
CLASSIFIER_FEATURES = 128  # the data classifier's penultimate layer ...
IMAGE_STATISTICS = 5  # ... plus this many image statistics per channel
GREY_SOURCES = ("digits", "torchvision:MNIST", "torchvision:FashionMNIST")  # every other source is read as RGB


def pca_dims(n: int, d: int) -> int:
    """Principal components a screen of n samples is compared in: a quarter of n (measured in
    ``benchmarks/screen_agreement.py``; n/8 agreed less with the full count), at most d."""
    return max(1, min(d, n // 4))


def screen_words(screen_by: str, n: int) -> str:
    """What the screen ranks by, in words."""
    if screen_by == "pca":
        return f"FID in {pca_dims(n, n)} principal components"
    return screen_by.upper()


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
            f"low-diversity settings first; screen with screen_by: pca ({screen_words('pca', screen_samples)}) "
            f"or use at least {d + 1}",
            fatal=True,
        ))  # fmt: skip
    if screening and screen_by == "kid" and screen_samples < 2:
        out.append(CountProblem("sampling.screen_samples", "KID needs at least 2 samples", fatal=True))
    if screening and screen_by == "pca" and screen_samples < 8:
        out.append(CountProblem(
            "sampling.screen_samples",
            f"{screen_samples} samples: the PCA screen compares a quarter of them in as many principal components; "
            "use at least 8",
            fatal=True,
        ))  # fmt: skip
    if num_samples <= d:
        out.append(CountProblem(
            "score.num_samples",
            f"{num_samples} samples are not more than {space}: every trial's FID is rank-deficient and favours "
            f"low-diversity samples; use at least {d + 1}",
            fatal=False,
        ))  # fmt: skip
    return out
