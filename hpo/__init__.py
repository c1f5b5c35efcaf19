"""hpo: hyperparameter optimisation for image diffusion models."""

__version__ = "0.2.0"
