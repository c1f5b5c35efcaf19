"""``hpo run``'s phases, each an existing part joined: the plan (:mod:`.plan`), the preflight, search and
decision (:mod:`.search`), the final run and its sweep (:mod:`.final`), the export (:mod:`.export`).
Each reads what the phases before it left in the ledger and the run's folder, so a phase can be run
again after a stop; :mod:`hpo.run.loop` runs them in the ledger's order."""
