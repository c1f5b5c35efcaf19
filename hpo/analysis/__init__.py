"""The read side: what a study's runs conclude (pure functions of their scores; no storage, no torch),
read from the records ``hpo.records`` types, and what is said about them (what ``hpo status``,
``narrow`` and ``report`` read without importing torch).

May import: ``hpo.spec``, ``hpo.records``, ``hpo.errors``, ``hpo.files``.
"""
