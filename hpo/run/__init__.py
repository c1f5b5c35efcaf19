"""The budgeted run's arithmetic and state, torch-free: ``hpo run FOLDER --budget 8h`` spends a
wall-clock budget from a folder of images to an exported model. Here: the budget's words
(:mod:`.budget`), its split between the phases from measured costs (:mod:`.split`), and the ledger of
planned and spent seconds that is the run's state (:mod:`.ledger`, read by ``hpo status`` too). The
phases themselves are existing commands' parts, joined in ``hpo.commands.run_phases``.

May import: ``hpo.errors``, ``hpo.files``. Never the layers that train, score or store: the
command joins them.
"""
