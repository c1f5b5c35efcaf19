"""Scoring samples with clean-fid: FID and KID against cached reference statistics, feature
extractors (Inception, or a classifier trained on the data), weights provisioning, and the
sampling sweep that scores one trained model at every (guidance, sampler steps, η, ...) combination.

May import: ``hpo.spec``, ``hpo.diffusion``, ``hpo.training``, ``hpo.records``, ``hpo.analysis``, ``hpo.errors``,
``hpo.files``.
"""
