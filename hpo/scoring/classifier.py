"""A small CNN trained once per labelled dataset; its penultimate layer gives FID features.

This is how FID is usually measured on MNIST-like data (LeNet features): it works offline and makes
tests and the CPU quickstart meaningful. Reports call the metric classifier-FID, never FID.

A classifier learns to ignore what does not change the class — pixel noise, speckle, brightness,
colour — which a person sees at once in a sample grid (benchmarks/metric_sensitivity.py measured
it: noise that doubles a grid's graininess moved the score by less than its noise). So the features
also carry a few image statistics per channel (mean, spread, high-frequency energy), each scaled to
unit spread on the training images like the penultimate features.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
import torch.nn.functional as F
from filelock import FileLock
from torch import nn

from hpo.errors import HpoError
from hpo.training.checkpoint import atomic_save, load_checkpoint
from hpo.training.data import ImageData, to_model_range

log = logging.getLogger("hpo.scoring")

CLASSIFIER_VERSION = 5  # 5: five image statistics per channel beside the penultimate features
FEATURE_DIM = 128
STATISTICS = 5  # per channel: mean, standard deviation, mean |Laplacian|, 10th and 90th percentile
STATISTIC_FLOOR = 0.05  # in [-1, 1] units (≈ 6 grey levels): the least spread a statistic is scaled by


def image_statistics(x: torch.Tensor) -> torch.Tensor:
    """(B, C·5) statistics of images in [-1, 1] that a classifier learns to ignore but a person sees:
    brightness / colour (mean; the 10th and 90th percentile, which follow a background's level even
    when each image has its own colours), contrast (std), graininess, speckle or blur (high-frequency
    energy). All continuous in the pixel values: a threshold (a share of pure-black pixels) flipped
    the score on a background one grey level off."""
    c = x.shape[1]
    kernel = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], device=x.device)
    laplacian = F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), kernel.expand(c, 1, 3, 3), groups=c)
    flat, lap = x.flatten(2), laplacian.flatten(2)
    levels = torch.quantile(flat, torch.tensor([0.1, 0.9], device=x.device), dim=2)  # (2, B, C)
    return torch.cat([flat.mean(2), flat.std(2), lap.abs().mean(2), levels[0], levels[1]], dim=1)


class ClassifierNet(nn.Module):
    def __init__(self, in_channels: int, num_classes: int, width: int = 32) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4), nn.Flatten(),
            nn.Linear(2 * width * 16, FEATURE_DIM),
        )  # fmt: skip
        self.head = nn.Linear(FEATURE_DIM, num_classes)
        self.feature_scale: torch.Tensor
        self.register_buffer("feature_scale", torch.ones(()))  # 1 / feature std on the training images
        self.statistics_scale: torch.Tensor
        self.register_buffer("statistics_scale", torch.ones(STATISTICS * in_channels))  # 1 / std, per statistic

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-activation penultimate features of images in [-1, 1] and their image statistics, each
        scaled to unit std on the training images so FID and KID (cubic kernel) see Inception-like
        magnitudes."""
        x = x[:, : self.in_channels]
        return torch.cat([self.body(x) * self.feature_scale, image_statistics(x) * self.statistics_scale], dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.body(x[:, : self.in_channels])))


def train_classifier(
    data: ImageData, *, epochs: int = 15, batch_size: int = 64, seed: int = 0
) -> tuple[ClassifierNet, float]:
    """Train on the training split; returns the network (eval mode, CPU) and validation accuracy."""
    if data.num_classes < 2:
        raise HpoError(
            f"score.features: classifier needs labelled data with at least 2 classes, but the data has "
            f"{data.num_classes}; use score.features: inception"
        )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        net = ClassifierNet(data.channels, data.num_classes)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        x_all, y_all = data.train_images.cpu(), data.train_labels.cpu()  # uint8: batches are converted
        for _ in range(epochs):
            for idx in torch.randperm(x_all.shape[0]).split(batch_size):
                loss = F.cross_entropy(net(to_model_range(x_all[idx])), y_all[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    net.eval()
    with torch.no_grad():
        features, statistics = [], []  # a chunk at a time: the set itself is never converted whole
        for first in range(0, x_all.shape[0], 1024):
            x = to_model_range(x_all[first : first + 1024])
            features.append(net.body(x))
            statistics.append(image_statistics(x))
        net.feature_scale.fill_(1.0 / float(torch.cat(features).std()))
        net.statistics_scale.copy_(1.0 / torch.cat(statistics).std(0).clamp_min(STATISTIC_FLOOR))
        pred = net(to_model_range(data.val_images.cpu())).argmax(1)
    return net, float((pred == data.val_labels.cpu()).float().mean())


def load_or_train_classifier(data: ImageData, cache_dir: Path) -> tuple[ClassifierNet, float]:
    """Train once per dataset; other processes wait on the lock and read the cached weights."""
    path = cache_dir / f"classifier-{data.key}-v{CLASSIFIER_VERSION}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.exists():
            state = load_checkpoint(path)
            net = ClassifierNet(int(state["channels"]), int(state["classes"]))
            net.load_state_dict(state["weights"])
            return net.eval(), float(state["val_accuracy"])
        net, accuracy = train_classifier(data)
        state = {
            "weights": net.state_dict(),
            "channels": data.channels,
            "classes": data.num_classes,
            "val_accuracy": accuracy,
        }
        atomic_save(state, path)
    log.info("trained the feature classifier for %s: validation accuracy %.3f", data.key, accuracy)
    if accuracy < 0.7:
        log.warning(
            "the feature classifier reaches only %.0f%% validation accuracy; classifier-FID will be coarse",
            100 * accuracy,
        )
    return net, accuracy
