"""The service: studies (create/load, sampler, pruner), storage (URLs, error reading, resilient
heartbeats), the start lock, the worker loop, the objective (Optuna's side of a trial), companion
confirmation studies, and the safe names that become paths.

May import: ``hpo.spec``, ``hpo.diffusion``, ``hpo.training``, ``hpo.scoring``, ``hpo.tracking``,
``hpo.errors``. Never ``hpo.report``, ``hpo.commands`` or ``hpo.cli``: the worker tells its caller
that a study finished through a callback.
"""
