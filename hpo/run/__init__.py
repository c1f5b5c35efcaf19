"""The budgeted run, ``hpo run FOLDER --budget 8h``: from a folder of images to an exported model in
one command that spends a wall-clock budget. The phases are existing parts in order (plan, preflight,
search, decide, final run, final sweep, export); this package holds only what joins them: the budget's
words (:mod:`.budget`), the split of the budget between phases (:mod:`.split`), the ledger of planned
and spent seconds that makes the run resumable (:mod:`.ledger`) and the phases themselves
(:mod:`.phases`, :mod:`.runner`). No training, scoring or study logic of its own.

May import: ``hpo.planning``, ``hpo.doctor``, ``hpo.service``, ``hpo.companions``, ``hpo.training``,
``hpo.scoring``, ``hpo.analysis``, ``hpo.spec``, ``hpo.errors``, ``hpo.files``, and the command
modules whose one function a phase is (``hpo.commands.train``, ``hpo.commands.export``,
``hpo.commands.launch``). Never ``hpo.cli``.
"""
