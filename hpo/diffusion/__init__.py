"""Diffusion pieces in plain PyTorch: schedules, the network protocol and our UNet, losses,
samplers. Knows no spec, no Optuna, no files.

May import: ``hpo.errors``, ``hpo.files``.
"""
