"""``hpo doctor``: the classic diffusion-training mistakes, caught before GPU hours are spent:
data, model, training step, schedule and budget checks, each with the number it saw.

May import: ``hpo.spec``, ``hpo.diffusion``, ``hpo.training``, ``hpo.errors``, ``hpo.files``.
"""
