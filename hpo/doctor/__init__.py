"""``hpo doctor``: the classic diffusion-training mistakes, caught before GPU hours are spent."""
