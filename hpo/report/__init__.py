"""The study's verdict as one self-contained HTML file: what the study's trials say (``data``),
the companions' sections (``companions``, from :data:`hpo.companions.KINDS`), how it looks
(``render``, ``figures``) and the plotly.js it inlines (``bundle``).

May import: ``hpo.companions``, ``hpo.service``, ``hpo.scoring``, ``hpo.tracking``, ``hpo.training``,
``hpo.diffusion``, ``hpo.analysis``, ``hpo.spec``, ``hpo.errors``, ``hpo.files``.
"""
