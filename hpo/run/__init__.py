"""``hpo run FOLDER --budget 8h``: a wall-clock budget spent from a folder of images to an exported
model. Here: the budget's words (:mod:`.budget`), its split between the phases from measured costs
(:mod:`.split`), the ledger of planned and spent seconds that is the run's state (:mod:`.ledger`, read
by ``hpo status`` too), and the phases themselves, each an existing part joined here (the planner, the
preflight doctor, the study and its local workers, the confirmation companion, one run trained and
swept, the export). Importing the package imports nothing: the report reads the ledger without torch.

May import: ``hpo.planning``, ``hpo.doctor``, ``hpo.companions``, ``hpo.service``, ``hpo.scoring``,
``hpo.tracking``, ``hpo.training``, ``hpo.diffusion``, ``hpo.records``, ``hpo.analysis``, ``hpo.spec``,
``hpo.outputs``, ``hpo.errors``, ``hpo.files``. Never ``hpo.report``, ``hpo.commands`` or ``hpo.cli``:
the command hands the run its report writer.
"""
