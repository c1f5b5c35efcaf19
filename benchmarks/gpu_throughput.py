"""The trainer on a GPU with the bikes network (35.7M parameters, 64 px, batch 128): images/s,
achieved TFLOP/s (FLOPs counted by torch's FlopCounterMode on one step) and MFU against the GPU's
bf16 dense peak, with torch.compile off and on. Peer: the peak the hardware allows.

    python -m benchmarks.gpu_throughput [--peak-tflops 989] [--batch 128] [--size 64]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.common import write_result
from benchmarks.train_throughput import synthetic_data
from hpo.files import JsonObject
from hpo.spec.config import TrainConfig
from hpo.training.model import count_parameters
from hpo.training.trainer import Trainer

BIKES = {"base_channels": 128, "channel_mult": (1, 2, 2, 2), "num_res_blocks": 2, "attention_resolutions": (16,)}


def measure(args: argparse.Namespace, compile_: bool) -> tuple[float, float, int]:
    cfg = TrainConfig(**BIKES, batch_size=args.batch, kimg=1000, device="cuda", compile=compile_, conditional=False)  # type: ignore[arg-type]
    trainer = Trainer(cfg, synthetic_data(args.size, n=4096), torch.device("cuda"))
    for _ in range(args.warmup):
        trainer.train_step()
    trainer.sync()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        trainer.train_step()
    trainer.sync()
    torch.cuda.synchronize()
    steps_per_second = args.steps / (time.perf_counter() - start)
    with FlopCounterMode(display=False) as counter:
        trainer.train_step()
    return steps_per_second, float(counter.get_total_flops()), count_parameters(trainer.model)


def report(batch: int, peak_tflops: float, compile_: bool, measured: tuple[float, float, int]) -> JsonObject:
    """Print one line of the table from ``measure``'s (steps/s, FLOPs per step, parameters); its figures."""
    sps, flops, params = measured
    images, tflops = sps * batch, flops * sps / 1e12
    mfu = tflops / peak_tflops
    print(
        f"compile={compile_!s:5}: {images:8.0f} images/s, {tflops:6.1f} TFLOP/s achieved, "
        f"MFU {mfu:.1%} of {peak_tflops:g} ({params / 1e6:.1f}M parameters)"
    )
    return {
        "compile": compile_, "images_per_second": images, "tflops": tflops, "mfu": mfu, "parameters": params,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak (H100/H200 SXM: 989)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark measures the GPU")
    print(f"{torch.cuda.get_device_name()}, bikes network, {args.size} px, batch {args.batch}, bf16 autocast")
    rows = [report(args.batch, args.peak_tflops, c, measure(args, c)) for c in (False, True)]
    write_result("gpu_throughput", {
        "gpu": torch.cuda.get_device_name(), "network": {"name": "bikes", **BIKES}, "size": args.size,
        "batch": args.batch, "steps": args.steps, "warmup": args.warmup, "peak_tflops": args.peak_tflops, "rows": rows,
    })  # fmt: skip


if __name__ == "__main__":
    main()
