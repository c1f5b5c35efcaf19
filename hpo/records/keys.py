"""Every attribute key the service writes on a trial or a study, in one place (``tests/records/test_record.py``
greps the package for a key spelt anywhere else)."""

# ---- a trial's attributes ----
BASELINE_ATTR = "baseline"  # enqueued from the spec's `baselines`
BASELINE_NAME_ATTR = "baseline_name"  # that baseline's name ("by hand", "baseline 2"); absent in older studies
CARRIED_ATTR = "carried_from"  # "STUDY#N": a prior observation copied by `hpo launch --warm-start`, never trained here
CONTINUES_ATTR = "continues"  # pruner: rung: the paused trial whose checkpoint this continuation resumes
HOST_FAULTS_ATTR = "host_faults"  # attempts before this one ended by a full disk: they spend no retry
WARM_START_ATTR = "warm_start"  # "STUDY#N": a configuration queued from another study's best, trained here
SOURCE_TRIAL_ATTR = "confirm_of"  # in a companion (confirmation, ladder, widths): the source trial's number
WATCH_SAMPLING_ATTR = "watch_sampling"  # in a ladder: the sampling every evaluation point is scored at
RAN_ON_ATTR = "ran_on"  # Placement.as_dict()
BUDGET_KIMG_ATTR = "budget_kimg"
CURVE_ATTR = "curve"  # {evaluation index: {metric: value}}
GRIDS_ATTR = "grids"  # {evaluation index: artifact of the sample strip}
SWEEP_ATTR = "sweep"  # [ComboScore.to_dict()], stored as each lands so that a retry rescores nothing
SAMPLES_ATTR = "samples"  # artifact: the best sampling's grid
CHECKPOINT_ATTR = "ema_checkpoint"  # artifact: the EMA weights
FID_REPEAT_ATTR = "fid_repeat"  # the best combination scored again on an independent sample set
NOISE_ATTR = "fid_noise"  # a trial: that pair's sd estimate (the value's noise); a study: {"sd", "pairs"} pooled
# `hpo train`'s summary.json: the sd of one evaluation point's score (the last point against the final weights
# measured again at the watched combination with other seeds). Not the value's noise, so not under
# NOISE_ATTR (summary.json files written before 2026-12 kept it there; TrialRecord.curve_noise reads both).
CURVE_NOISE_ATTR = "curve_noise"
EMA_SNAPSHOTS_ATTR = "ema_snapshots"
LINEAGE_ATTR = "lineage"  # wsd: {"continued_from_kimg", "cooldown_kimg"}: what a run continued, where it cooled
BRANCH_ATTR = "branch"  # wsd: {"path": under the artifact store, "kimg"}: the stable-phase state a longer run continues
HARDWARE_ATTR = "hardware"
METRIC_NAME_ATTR = "metric_name"  # the score's name (FID, classifier-FID)
STATISTIC_ATTR = "statistic"  # what the value is: analysis.sweep.value_statistic (count, features, bias, pick)
VALUE_ATTR = "value"  # `hpo train`'s score (a trial's is its Optuna value)
STOP_ATTR = "stop"  # `hpo train`'s stop verdict: StopVerdict.as_dict(): {kind, text, since_kimg, per_doubling}
TENSORBOARD_ATTR = "tensorboard"  # `hpo train`'s TensorBoard folder
FAIL_REASON_ATTR, ERROR_ATTR = "fail_reason", "error"
STOPPED_AT_ATTR, OOM_BATCH_ATTR = "stopped_at_kimg", "oom_batch_size"
ENDING_ATTRS = (
    FAIL_REASON_ATTR,
    ERROR_ATTR,
    STOPPED_AT_ATTR,
    OOM_BATCH_ATTR,
)  # how an attempt ended: a retry drops them
FIDELITY_KEYS = ("precision", "recall", "class_accuracy")  # a score's second signal (also the floor's keys)

# The metric reported at each evaluation point (what pruners compare), a key of every curve entry:
# benchmarks/pruning_signal.py measures how well each candidate ranks trials by their final score, and
# docs/benchmarks.md explains the choice.
PRUNING_METRIC = "val_rel"

# ---- a study's attributes ----
SPEC_ATTR, HASH_ATTR, VERSION_ATTR = "hpo_spec", "hpo_spec_hash", "hpo_version"
DATA_ATTR = "data"  # the data's image counts, classes and size (ImageData.summary): the report's header
FLOOR_ATTR = "floor"  # real held-out images scored like samples (score, copy share): measured once per study
REAL_GRID_ATTR = "real_grid"  # artifact: real validation images beside the samples
REPORTED_ATTR = "hpo_report_written"
RUN_ATTR = "hpo_run"  # `hpo run`'s ledger (hpo.run.ledger.Ledger.to_dict) on its search study
# A companion's source study, and the source's pointer to its confirmation. The stored keys keep their
# first names ("confirm_of" for the source trial above, "hpo_confirm_of" here) so that studies already in
# a database still read; the Python names say which is which.
SOURCE_STUDY_ATTR, CONFIRMED_BY = "hpo_confirm_of", "hpo_confirmed_by"
LADDER, LADDER_BY = "hpo_ladder", "hpo_ladder_by"  # a budget ladder's plan; the source study's pointer to it
WIDTHS, WIDTHS_BY = "hpo_widths", "hpo_widths_by"  # a width ladder's plan; the source study's pointer to it


COPY_SPACES = ("pixels", "features")  # where a copy share is measured: raw pixels, classifier features
