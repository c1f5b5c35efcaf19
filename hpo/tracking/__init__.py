"""Telemetry of a run where practitioners look: TensorBoard event logs (always, unless a spec turns
them off), and Weights & Biases or MLflow runs when a spec asks. Receives the trainer's sync and
evaluation points, images and final numbers; knows no Optuna.

May import: ``hpo.spec``, ``hpo.training``, ``hpo.diffusion``, ``hpo.errors``, ``hpo.files``.
"""
