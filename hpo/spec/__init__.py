"""Settings: YAML → typed, validated, frozen objects (the bottom layer).

Owns: the spec file format and its limits, every setting's type and range, the cross-field rules
(sampler steps against T, the budget against the evaluation points), the search space and the
sampling sweep, and the one parser of a spec stored in a study.
May import: ``hpo.errors``, ``hpo.files`` (plus PyYAML). Everything above reads settings from here.
"""
