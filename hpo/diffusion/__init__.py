"""Diffusion pieces in plain PyTorch: schedules, network, loss, samplers. No Optuna here."""
