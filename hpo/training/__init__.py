"""One training run: data sources and their cache, the network (ours or a user factory), the
trainer with its callbacks, the canonical validation metric, generation, checkpoints.
Knows nothing of Optuna; callers learn about progress through callbacks.

May import: ``hpo.spec``, ``hpo.records``, ``hpo.diffusion``, ``hpo.errors``, ``hpo.files``.
"""
