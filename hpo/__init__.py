"""hpo: hyperparameter optimisation for image diffusion models."""

__version__ = "0.1.0"
