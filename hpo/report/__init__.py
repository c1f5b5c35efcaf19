"""The study's verdict as one self-contained HTML file: everything the page says, computed in one
place into a typed model (``model.build``, from the study's trials via ``data`` and the companions'
readings), and how it looks (``render`` formats the model only; ``companions`` formats the
companions' blocks; ``figures``; the plotly.js it inlines, ``bundle``).

May import: ``hpo.run``, ``hpo.companions``, ``hpo.service``, ``hpo.scoring``, ``hpo.tracking``, ``hpo.training``,
``hpo.diffusion``, ``hpo.records``, ``hpo.analysis``, ``hpo.spec``, ``hpo.outputs``, ``hpo.errors``, ``hpo.files``.
"""
