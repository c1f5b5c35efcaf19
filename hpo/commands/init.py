"""``hpo init IMAGES -o spec.yaml``: a commented spec for a folder of images, planned for the
machine here (its GPU's memory, else the CPU) or for another one (``--gpu-memory GB``)."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from hpo.commands.outputs import output_file, write_output
from hpo.doctor.model_checks import stand_in_data, study_time, trial_cost, trial_seconds
from hpo.doctor.run import base_config, batch_size_configs
from hpo.doctor.survey import survey_folder
from hpo.errors import HpoError
from hpo.planning.plan import Machine, Plan, choose_image_size, epochs, plan_spec
from hpo.planning.spec_yaml import plan_yaml
from hpo.scoring.weights import verify_weights, weights_path
from hpo.spec.loading import load_spec
from hpo.spec.rules import check_study_name
from hpo.spec.spec import Spec
from hpo.training.runtime import default_memory_limit, resolve_device


def this_machine(gpu_memory_gb: float | None) -> Machine:
    """``--gpu-memory`` plans for another machine; else CUDA device 0's memory, else the CPU plan in
    the memory the doctor allows there (80% of RAM)."""
    if gpu_memory_gb is not None:
        if gpu_memory_gb <= 0:
            raise HpoError(f"--gpu-memory {gpu_memory_gb:g}: give the GPU's memory in GB, e.g. 24 or 80")
        return Machine("gpu", int(gpu_memory_gb * 2**30), f"a GPU with {gpu_memory_gb:g} GiB (--gpu-memory)")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        memory = int(props.total_memory)
        return Machine("gpu", memory, f"this machine's GPU ({props.name}, {memory / 2**30:.0f} GiB)")
    memory = default_memory_limit(torch.device("cpu"))
    return Machine("cpu", memory, f"this machine's CPU ({memory / 2**30:.0f} GiB, 80% of its memory)")


def weights_here() -> bool:
    try:
        verify_weights(weights_path())
    except HpoError:
        return False
    return True


def default_name(images: Path, size: int) -> str:
    """The folder's name and the image size (``bikes-128``), made a safe study name."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", images.resolve().name).strip("-._") or "images"
    return f"{stem[:90]}-{size}"


def predicted_time(spec: Spec, plan: Plan) -> str:
    """The study's time on this machine: two training steps of the planned network timed at the
    smallest batch size (the quickest to time; per image a larger batch usually costs no more, so it errs
    long) and two sampling passes at the score's batch (the sweep's network evaluations at that speed),
    on random images of the folder's shape (the folder itself is not read)."""
    cfg = base_config(spec)
    device = resolve_device(cfg.device)
    smallest = batch_size_configs(spec, cfg.replace(device=str(device)))[0]
    data = stand_in_data(smallest.batch_size, plan.image_size, max(plan.survey.num_classes, 1))
    train = trial_seconds(smallest, data, device)
    cost = trial_cost(spec.sampling, spec.score, smallest, data, device, train_seconds=train)
    return (
        f"study time: {study_time(cost, plan.n_trials, 1)}; timed at batch {smallest.batch_size} on "
        f"{device.type}. `hpo doctor` times every batch size on the images themselves"
    )


def summary(plan: Plan, out: Path, *, timed: str | None) -> list[str]:
    net, b, sc, se = plan.network, plan.budget, plan.scoring, plan.search
    return [
        f"found {plan.survey.words()}",
        f"image size {plan.image_size} px ({plan.size_share:.0%} of the images are at least that large); "
        f"{plan.n_train} train / {plan.n_val} held out",
        f"network: {net.base_channels} channels x {list(net.channel_mult)}, {net.num_res_blocks} block(s) per level, "
        f"attention at {list(net.attention_resolutions) or 'the middle block only'}: {net.parameters / 1e6:.1f}M "
        "parameters",
        f"budget: {b.kimg:g} kimg per trial ({epochs(b.kimg, plan.n_train):.0f} epochs), target {b.target_kimg:g} "
        f"kimg; the data supports {b.supported_kimg:g} kimg before memorising is likely",
        f"batch sizes {', '.join(map(str, se.batch_sizes))} for {plan.machine.words}: "
        f"~{net.need(se.batch_sizes[-1]) / 2**30:.1f} GiB at {se.batch_sizes[-1]} by the doctor's count",
        plan.data_words(),
        f"score: {sc.features} FID on {sc.num_samples} samples ({sc.dims} feature dimensions)"
        + ("" if sc.features == "classifier" or sc.weights_present else "; run `hpo fetch-weights` first"),
        timed or f"study time: `hpo doctor {out}` (without --fast) on that machine times a few steps and predicts it",
        f"wrote {out}",
        f"next: hpo doctor {out}   then   hpo launch {out}",
    ]


def require_folder(images: Path) -> Path:
    """``images`` if it is a folder; else one line naming it and what to give instead."""
    if not images.is_dir():
        raise HpoError(f"{images}: not a folder; give the folder of images (subfolders are classes)")
    return images


def run_init(
    images: Path,
    out: Path,
    *,
    image_size: int | None,
    gpu_memory_gb: float | None,
    name: str | None,
    force: bool,
) -> list[str]:
    """Check ``out`` first (an existing spec is overwritten only with ``force``), survey the folder,
    plan, write the spec, load it back as `hpo launch` will; returns the summary lines."""
    output_file(out, example="spec.yaml", force=force)
    require_folder(images)
    survey = survey_folder(images)
    machine = this_machine(gpu_memory_gb)
    study = name or default_name(images, choose_image_size(survey, image_size))
    check_study_name(study, key="--name")
    plan = plan_spec(survey, machine, name=study, image_size=image_size, weights_present=weights_here())
    write_output(out, plan_yaml(plan, str(images)))
    spec = load_spec(out)  # what was written loads and validates
    return summary(plan, out, timed=predicted_time(spec, plan) if gpu_memory_gb is None else None)
