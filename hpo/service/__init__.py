"""The service: studies (create/load, sampler, pruner), storage (URL, engine, resilient heartbeats),
the start lock, the worker loop, the objective (the only code that touches a trial), companion
confirmation studies, and the safe names that become paths.

May import: ``hpo.spec``, ``hpo.diffusion``, ``hpo.training``, ``hpo.scoring``, ``hpo.tracking``,
``hpo.errors``. Never ``hpo.report``, ``hpo.commands`` or ``hpo.cli``: the worker tells its caller
that a study finished through a callback.
"""
