"""Training steps per second: our trainer against Hugging Face diffusers' UNet2DModel +
DDPMScheduler in a plain training loop, at (nearly) equal parameter count, image size and batch.

    .venv/bin/pip install diffusers && .venv/bin/python -m benchmarks.train_throughput [--size 32 --batch 32]

Prints both figures and the ratio (target: ours >= 1.0x). On CUDA also images/s and achieved
bf16 TFLOP/s of our step.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.common import write_result
from hpo.spec.config import TrainConfig
from hpo.training.data import ImageData
from hpo.training.model import count_parameters
from hpo.training.runtime import resolve_device
from hpo.training.trainer import Trainer


def synthetic_data(size: int, n: int = 2048) -> ImageData:
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=gen)
    labels = torch.zeros(n, dtype=torch.int64)
    return ImageData(images, labels, images[:64], labels[:64], ("x",), "bench")


def time_steps(step: object, n: int, warmup: int, device: torch.device) -> float:
    for _ in range(warmup):
        step()  # type: ignore[operator]
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        step()  # type: ignore[operator]
    if device.type == "cuda":
        torch.cuda.synchronize()
    return n / (time.perf_counter() - start)


def ours(args: argparse.Namespace, device: torch.device) -> tuple[float, int, Trainer]:
    cfg = TrainConfig(
        base_channels=args.channels,
        channel_mult=(1, 2, 2),
        num_res_blocks=2,
        attention_resolutions=(args.size // 2,),
        batch_size=args.batch,
        kimg=1000,
        device=str(device),
        conditional=False,
        dropout=0.1,
    )
    trainer = Trainer(cfg, synthetic_data(args.size), device)
    return time_steps(trainer.train_step, args.steps, args.warmup, device), count_parameters(trainer.model), trainer


def diffusers_loop(args: argparse.Namespace, device: torch.device) -> tuple[float, int]:
    from diffusers import DDPMScheduler, UNet2DModel

    c = args.channels
    unet = UNet2DModel(
        sample_size=args.size,
        in_channels=3,
        out_channels=3,
        layers_per_block=2,
        block_out_channels=(c, 2 * c, 2 * c),
        dropout=0.1,
        down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
    ).to(device)  # type: ignore[attr-defined]
    scheduler = DDPMScheduler(num_train_timesteps=1000)
    opt = torch.optim.AdamW(unet.parameters(), lr=2e-4, fused=device.type == "cuda")
    data = synthetic_data(args.size).train_images.to(device)

    def step() -> None:
        idx = torch.randint(0, data.shape[0], (args.batch,), device=device)
        x0 = data[idx].float() / 127.5 - 1
        noise = torch.randn_like(x0)
        t = torch.randint(0, 1000, (args.batch,), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
            noisy = scheduler.add_noise(x0, noise, t)  # type: ignore[attr-defined]
            pred = unet(noisy, t).sample
        loss = F.mse_loss(pred.float(), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
        opt.step()

    return time_steps(step, args.steps, args.warmup, device), count_parameters(unet)


def cuda_figures(trainer: Trainer, steps_per_s: float, batch: int) -> dict[str, float]:
    """Images per second and achieved TFLOP/s of our step (one step counted, at the measured rate)."""
    with FlopCounterMode(display=False) as counter:
        trainer.train_step()
    flops = counter.get_total_flops()
    return {"images_per_s": steps_per_s * batch, "tflop_per_s": flops * steps_per_s / 1e12}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = resolve_device(args.device)
    print(f"device {device}, {torch.get_num_threads()} threads, {args.size}px, batch {args.batch}")
    ours_sps, ours_params, trainer = ours(args, device)
    theirs_sps, theirs_params = diffusers_loop(args, device)
    print(
        f"hpo trainer        : {ours_sps:7.2f} steps/s  ({ours_params / 1e6:.2f}M parameters, EMA + NaN guard included)"
    )
    print(f"diffusers loop     : {theirs_sps:7.2f} steps/s  ({theirs_params / 1e6:.2f}M parameters)")
    ratio = ours_sps / theirs_sps
    print(f"ratio hpo/diffusers: {ratio:.2f}x")
    cuda: Mapping[str, float | None] = {"images_per_s": None, "tflop_per_s": None}
    if device.type == "cuda":
        cuda = cuda_figures(trainer, ours_sps, args.batch)
        print(f"hpo images/s: {cuda['images_per_s']:.0f}; achieved {cuda['tflop_per_s']:.1f} TFLOP/s (bf16 autocast)")
    write_result("train_throughput", {
        "device": str(device), "threads": torch.get_num_threads(), "size": args.size, "batch": args.batch,
        "channels": args.channels, "steps": args.steps, "warmup": args.warmup, "hpo_steps_per_s": ours_sps,
        "hpo_parameters": ours_params, "diffusers_steps_per_s": theirs_sps, "diffusers_parameters": theirs_params,
        "ratio": ratio, **cuda,
    })  # fmt: skip


if __name__ == "__main__":
    main()
