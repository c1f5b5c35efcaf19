"""Where the doctor's coord-check threshold comes from: each layer's growth exponent under µP and
under the standard parameterisation, over the settings the threshold was calibrated on.

Digits at 16 px, the UNet with channel_mult 1, 2, attention at 8 px and µP's base at 16 channels, at
run widths 32 (checked at 8/16/32) and 64 (16/32/64), lr 1e-3 and 1e-2, 3 and 6 steps: 8 settings per
parameterisation. Printed per setting: the largest growth exponent and its layer, and how many layers
exceed the doctor's ``MAX_GROWTH``. Peer: the other parameterisation on the same setting.

    .venv/bin/python -m benchmarks.coord_check
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch

from benchmarks.common import write_result
from hpo.doctor.coord_check import MAX_GROWTH, coord_growth, widths_for
from hpo.files import JsonObject
from hpo.spec.config import DataConfig, Parameterization, TrainConfig
from hpo.training.data import ImageData, load_data

PARAMETERISATIONS: tuple[Parameterization, ...] = ("mup", "standard")
WIDTHS = (32, 64)
LRS = (1e-3, 1e-2)
STEPS = (3, 6)


def setting_row(data: ImageData, parameterization: Parameterization, width: int, lr: float, steps: int) -> JsonObject:
    """Measure one setting and print its line; its figures (``largest``: the largest growth exponent,
    at ``layer``; ``over`` of ``layers`` exceed ``MAX_GROWTH``)."""
    cfg = TrainConfig(
        base_channels=width, lr=lr, batch_size=32, device="cpu", parameterization=parameterization,
        mup_base_channels=16, channel_mult=(1, 2), attention_resolutions=(8,),
    )  # fmt: skip
    growth = coord_growth(cfg, data, torch.device("cpu"), steps=steps)
    worst = max(growth, key=lambda g: max(g.init, g.move))
    largest, widths = max(worst.init, worst.move), widths_for(width)
    over = sum(1 for g in growth if max(g.init, g.move) > MAX_GROWTH)
    print(
        f"{parameterization:>16} {'/'.join(map(str, widths)):>9} {lr:6.0e} {steps:5d} {largest:8.2f}  "
        f"{worst.name:<24} {over}/{len(growth)}",
        flush=True,
    )
    return {
        "parameterisation": parameterization, "widths": widths, "lr": lr, "steps": steps, "largest": largest,
        "layer": worst.name, "over": over, "layers": len(growth),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = load_data(DataConfig(source="digits", image_size=16))
    started = time.perf_counter()
    print(
        f"{'parameterisation':>16} {'widths':>9} {'lr':>6} {'steps':>5} {'largest':>8}  {'layer':<24} over {MAX_GROWTH}"
    )
    rows = [setting_row(data, *setting) for setting in itertools.product(PARAMETERISATIONS, WIDTHS, LRS, STEPS)]
    seconds = time.perf_counter() - started
    print(f"\n{seconds:.0f} s in all ({args.threads} thread(s))")
    result = {
        "source": "digits", "image_size": 16, "run_widths": WIDTHS, "lrs": LRS, "steps": STEPS,
        "max_growth": MAX_GROWTH, "threads": args.threads, "rows": rows, "seconds": seconds,
    }  # fmt: skip
    write_result("coord_check", result)


if __name__ == "__main__":
    main()
