"""``hpo init``'s planner: a folder's facts and a machine in, a typed plan out (``plan``), written as
a commented spec in the house style (``spec_yaml``), for a machine (``machine``), with one trial of
it timed here (``timing``: ``hpo init``'s study time and ``hpo run``'s sizing). Not a check: it
applies the doctor's rules (the data budget, the memory count, the scoring dimensions) to choose
values, so it sits above the doctor.

May import: ``hpo.doctor``, ``hpo.spec``, ``hpo.diffusion``, ``hpo.training``, ``hpo.errors``,
``hpo.files``.
"""
