"""Feature extractors, fed exactly as clean-fid's ``clean`` mode feeds them.

Each image goes in as RGB uint8 HWC (grayscale repeated to 3 channels), through clean-fid's PIL
bicubic float resizer to the extractor's input size, then as float [0, 255] to the network. clean-fid
does not rescale [-1, 1] input, so :func:`extract` accepts uint8 only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from cleanfid.resize import build_resizer, make_resizer

from hpo.scoring.classifier import CLASSIFIER_VERSION, ClassifierNet, load_or_train_classifier
from hpo.scoring.weights import verify_weights
from hpo.spec.config import metric_name
from hpo.training.data import ImageData


@dataclass(frozen=True, eq=False)
class FeatureExtractor:
    name: str  # inception | classifier
    metric_name: str  # what reports call the FID computed with it
    ident: str  # identity of the weights, part of the reference-statistics cache key
    resize: Callable[[np.ndarray], np.ndarray]  # RGB uint8 HWC → float32 HWC at the input size
    forward: Callable[[torch.Tensor], torch.Tensor]  # float (B, 3, S, S) in [0, 255] → (B, D)
    device: torch.device
    classify: Callable[[torch.Tensor], torch.Tensor] | None = None  # logits, for class accuracy

    def __call__(self, batch: torch.Tensor) -> torch.Tensor:
        """clean-fid's ``custom_feat_extractor`` interface."""
        with torch.no_grad():
            return self.forward(batch.to(self.device).float())


def inception_extractor(weights: Path, device: torch.device) -> FeatureExtractor:
    """clean-fid's InceptionV3W in clean mode (normalise (x−128)/128, no internal resize)."""
    verify_weights(weights)
    base = torch.jit.load(str(weights), map_location=device).eval()

    def forward(x: torch.Tensor) -> torch.Tensor:
        return base.layers.forward((x - 128.0) / 128.0).view(x.shape[0], 2048)

    return FeatureExtractor(
        "inception", metric_name("inception"), "inception-2015-12-05", build_resizer("clean"), forward, device
    )


def classifier_extractor(data: ImageData, cache_dir: Path, device: torch.device) -> FeatureExtractor:
    net, _ = load_or_train_classifier(data, cache_dir)
    net = net.to(device)
    size = data.image_size

    def prepare(x: torch.Tensor) -> torch.Tensor:
        return x / 127.5 - 1.0

    def forward(x: torch.Tensor) -> torch.Tensor:
        return net.features(prepare(x))

    def classify(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return ClassifierNet.forward(net, prepare(x.to(device).float()))

    resize = make_resizer("PIL", False, "bicubic", (size, size))
    ident = f"classifier-v{CLASSIFIER_VERSION}-{data.key}"
    return FeatureExtractor("classifier", metric_name("classifier"), ident, resize, forward, device, classify)


def to_hwc_rgb(images: torch.Tensor) -> np.ndarray:
    """uint8 (N, C, H, W) → uint8 (N, H, W, 3)."""
    if images.dtype != torch.uint8:
        raise TypeError(
            f"feature extraction takes uint8 images in [0, 255], got {images.dtype}; "
            "convert model output with hpo.training.data.to_uint8 (clean-fid does not rescale [-1, 1] input)"
        )
    if images.shape[1] == 1:
        images = images.repeat(1, 3, 1, 1)
    return images.permute(0, 2, 3, 1).cpu().numpy()


def resize_batch(extractor: FeatureExtractor, images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, C, H, W) → float32 (N, 3, S, S) in [0, 255], resized like clean-fid, in threads."""
    hwc = to_hwc_rgb(images)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        resized = list(pool.map(extractor.resize, hwc))
    return torch.from_numpy(np.stack(resized).transpose(0, 3, 1, 2).copy())


def classified_share(
    extractor: FeatureExtractor, images: torch.Tensor, labels: torch.Tensor, *, batch_size: int = 250
) -> float | None:
    """The share of ``images`` the classifier assigns to their label (None without a classifier)."""
    if extractor.classify is None:
        return None
    hits = 0
    for i in range(0, images.shape[0], batch_size):
        predicted = extractor.classify(resize_batch(extractor, images[i : i + batch_size])).argmax(1).cpu()
        hits += int((predicted == labels[i : i + batch_size].cpu()).sum())
    return hits / max(images.shape[0], 1)


def extract(extractor: FeatureExtractor, images: torch.Tensor, *, batch_size: int = 250) -> np.ndarray:
    """Features (N, D) as float64 of uint8 images (N, C, H, W)."""
    feats = [
        extractor(resize_batch(extractor, images[i : i + batch_size])).cpu().numpy()
        for i in range(0, images.shape[0], batch_size)
    ]
    return np.concatenate(feats).astype(np.float64)
