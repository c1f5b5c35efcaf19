"""The service: studies (create/load, sampler, pruner), storage (URLs, error reading, resilient
heartbeats), the start lock, the worker loop, the objective (Optuna's side of a trial), the safe
names that become paths, the local worker processes (``local``), the status read model
(``status_view``) and the export format (``export``). Companion studies live one layer up
(``hpo.companions``).

May import: ``hpo.spec``, ``hpo.diffusion``, ``hpo.training``, ``hpo.scoring``, ``hpo.tracking``,
``hpo.records``, ``hpo.analysis``, ``hpo.outputs``, ``hpo.errors``, ``hpo.files``. Never ``hpo.companions``,
``hpo.report``, ``hpo.commands`` or ``hpo.cli``: the worker tells its caller that a study finished through a
callback.
"""
