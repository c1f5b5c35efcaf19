"""The study's verdict as one self-contained HTML file: what the report says (``data``,
``importance``, ``noise``, ``confirm``), computed from a study, and how it looks (``render``,
``figures``).

May import: ``hpo.service``, ``hpo.scoring``, ``hpo.training``, ``hpo.spec``, ``hpo.errors``.
"""
