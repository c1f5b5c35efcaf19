"""``hpo init IMAGES -o spec.yaml``: a commented spec for a folder of images, planned for the
machine here (its GPU's memory, else the CPU) or for another one (``--gpu-memory GB``)."""

from __future__ import annotations

from pathlib import Path

from hpo.doctor.model_checks import study_time
from hpo.doctor.survey import require_folder, survey_folder
from hpo.outputs import output_file, write_output
from hpo.planning.machine import default_name, this_machine
from hpo.planning.plan import Plan, choose_image_size, epochs, plan_spec
from hpo.planning.spec_yaml import plan_yaml
from hpo.planning.timing import time_trial
from hpo.scoring.weights import weights_present
from hpo.spec.loading import load_spec
from hpo.spec.rules import check_study_name
from hpo.spec.spec import Spec


def predicted_time(spec: Spec, plan: Plan) -> str:
    """The study's time on this machine, from one trial timed here (:mod:`hpo.planning.timing`)."""
    timed = time_trial(spec, plan)
    return (
        f"study time: {study_time(timed.cost, plan.n_trials, 1)}; timed at batch {timed.smallest.batch_size} on "
        f"{timed.device.type}. `hpo doctor` times every batch size on the images themselves"
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
    plan = plan_spec(survey, machine, name=study, image_size=image_size, weights_present=weights_present())
    write_output(out, plan_yaml(plan, str(images)))
    spec = load_spec(out)  # what was written loads and validates
    return summary(plan, out, timed=predicted_time(spec, plan) if gpu_memory_gb is None else None)
