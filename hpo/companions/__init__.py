"""Companion studies: a second study derived from a first (its top configurations retrained: with
fresh seeds, to longer budgets, at other widths), served by the same workers and read back into a
verdict. One protocol (:class:`~hpo.companions.base.Kind`), one module per kind, and the registry
below that ``hpo confirm``, ``hpo status`` and the report iterate.

Adding a kind: a module with a ``Kind`` object (create, read into a ``Reading``: the report's blocks,
printed through ``blocks.blocks_text``, and JSON) and its pure verdict in ``hpo.analysis``, then one
line in :data:`KINDS` and its flag in :attr:`~hpo.companions.base.Request.kind`.

May import: ``hpo.service``, ``hpo.records``, ``hpo.analysis``, ``hpo.spec``, ``hpo.diffusion`` (to size a width),
``hpo.training``, ``hpo.scoring``, ``hpo.tracking``, ``hpo.outputs``, ``hpo.errors``, ``hpo.files``. Never
``hpo.report``, ``hpo.commands`` or ``hpo.cli``.
"""

from __future__ import annotations

from hpo.companions.base import Kind, Request
from hpo.companions.confirm import CONFIRM
from hpo.companions.ladder import LADDER_KIND
from hpo.companions.widths import WIDTHS_KIND

KINDS: tuple[Kind, ...] = (CONFIRM, LADDER_KIND, WIDTHS_KIND)  # in the report's order


def kind_for(request: Request) -> Kind:
    """The kind the request names (:attr:`Request.kind`)."""
    by_name = {k.name: k for k in KINDS}
    if request.kind not in by_name:
        raise ValueError(f"request {request} names kind {request.kind!r}; registered: {', '.join(by_name)}")
    return by_name[request.kind]
