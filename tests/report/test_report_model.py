"""The report is computed in one place and formatted in another: :func:`hpo.report.build.build` reads
the study and computes every number, verdict and figure; :mod:`hpo.report.render` only lays the
model out. Read from render.py's source (every import and attribute, also inside functions), so a
statistic or a study read that creeps back into the formatting fails here, not in review."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.storages import BaseStorage

from hpo.report import model
from hpo.report.build import build
from hpo.report.render import page_html, render
from tests.service_helpers import storage_of
from tests.study_builders import add, new_study

RENDER = Path(__file__).parents[2] / "hpo" / "report" / "render.py"
ENTRY = "build"  # the only call that may see the study or its storage
COMPUTING = ("hpo.analysis", "hpo.service", "hpo.companions", "hpo.report.data", "hpo.report.build", "optuna", "plotly")
# The names render takes from a computing layer, and why: ``build`` (the one computing step), and
# ``path_component``: ``report_path`` (the file the commands write the page to) names it after the
# study with this pure function of a string; it reads nothing.
ALLOWED = {("hpo.service.names", "path_component"), ("hpo.report.build", ENTRY)}
FIGURES = {"figure_html"}  # from hpo.report.figures: lay a drawn figure out; drawing one is the model's
# Reads of a file or the artifact store, besides every public member of a study and a storage.
READS = {"open_reader", "is_file", "is_dir", "exists", "read_text", "read_bytes", "study_name", "system_attrs"}

# What a model field must not hold: something render could read a study from or compute a verdict on.
COMPUTED = re.compile(r"\b(FrozenTrial|Study|\w*Storage|\w*ArtifactStore|Summary|Importances|Noise|ComboScore)\b")


def study_members() -> set[str]:
    """Public names of Optuna's study and storage: an attribute render must never touch."""
    return {n for cls in (optuna.Study, BaseStorage) for n in dir(cls) if not n.startswith("_")} | READS


def type_checking_blocks(tree: ast.Module) -> set[int]:
    """Ids of import nodes under ``if TYPE_CHECKING:`` (annotations only, never run)."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            inside |= {id(n) for child in node.body for n in ast.walk(child)}
    return inside


def wrong_imports(tree: ast.Module) -> list[str]:
    """Imports from a layer that computes or reads, outside ``if TYPE_CHECKING:`` and :data:`ALLOWED`."""
    annotations_only = type_checking_blocks(tree)
    wrong = []
    for node in ast.walk(tree):
        if id(node) in annotations_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {a.name for a in node.names}
            if node.module == "hpo.report.figures":
                wrong += [f"figures.{n}" for n in sorted(names - FIGURES)]
            elif node.module.startswith(COMPUTING):
                wrong += [f"{node.module}.{n}" for n in sorted(names) if (node.module, n) not in ALLOWED]
            elif node.module == "hpo.report":
                wrong += [f"hpo.report.{n}" for n in sorted(names)]  # a module: use its names one by one
        elif isinstance(node, ast.Import):
            wrong += [a.name for a in node.names if a.name.startswith(COMPUTING)]
    return wrong


def study_reads(tree: ast.Module) -> list[str]:
    """Attributes of a study, storage or store read in render, and any use of ``study`` or ``storage``
    besides handing them to :func:`~hpo.report.build.build`."""
    members = study_members()
    handed = {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == ENTRY
        for arg in node.args
    }
    nodes = list(ast.walk(tree))
    found = [f"line {n.lineno}: .{n.attr}" for n in nodes if isinstance(n, ast.Attribute) and n.attr in members]
    found += [
        f"line {n.lineno}: {n.id}"
        for n in nodes
        if isinstance(n, ast.Name) and n.id in ("study", "storage") and id(n) not in handed
    ]
    return found


def test_render_imports_nothing_that_computes_or_reads() -> None:
    assert wrong_imports(ast.parse(RENDER.read_text())) == []


def test_render_reads_no_study_storage_or_store_and_hands_the_study_to_build_only() -> None:
    assert study_reads(ast.parse(RENDER.read_text())) == []


def test_the_guard_catches_a_statistic_and_a_study_read_put_back_into_render() -> None:
    planted = ast.parse(
        "from hpo.analysis.ranking import ties_with_best\n"
        "from hpo.report.figures import curve_figure, figure_html\n"
        "from hpo.service.names import path_component\n"
        "import optuna\n"
        "def samples_html(study, m):\n"
        "    return ties_with_best(study.get_trials(), m.noise)\n"
    )
    assert wrong_imports(planted) == ["hpo.analysis.ranking.ties_with_best", "figures.curve_figure", "optuna"]
    assert study_reads(planted) == ["line 6: .get_trials", "line 6: study"]


def model_classes() -> list[type[Any]]:
    """The classes :mod:`hpo.report.model` defines."""
    return [c for _, c in inspect.getmembers(model, inspect.isclass) if c.__module__ == model.__name__]


def test_every_piece_of_the_model_is_a_frozen_dataclass() -> None:
    classes = model_classes()
    assert classes and all(dataclasses.is_dataclass(c) for c in classes)
    assert [c.__name__ for c in classes if not c.__dataclass_params__.frozen] == []


def test_the_model_holds_no_trial_study_or_storage_so_render_cannot_read_one() -> None:
    fields = {f"{c.__name__}.{f.name}": str(f.type) for c in model_classes() for f in dataclasses.fields(c)}
    held = {k: t for k, t in fields.items() if COMPUTED.search(t)}
    assert held == {}, "the model holds what render could compute from or read"


def normalised(page: str) -> str:
    """Without what changes from one rendering to the next: the time and Plotly's div ids."""
    page = re.sub(r"generated [0-9-]+ [0-9:]+", "generated T", page)
    return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "UUID", page)


def test_the_page_is_the_model_formatted_and_the_model_holds_what_it_says(tmp_path: Path) -> None:
    study = new_study(tmp_path, "modelled")
    add(study, {"lr": 1e-3}, value=9.0, curve=[1.0, 0.8, 0.7], baseline=True)
    add(study, {"lr": 3e-3}, value=7.0, curve=[1.0, 0.6, 0.4])
    add(study, {"lr": 9e-3}, value=None, curve=[1.0, 1.1], state=optuna.trial.TrialState.PRUNED)
    built = build(study, storage_of(study), None)
    assert built.name == "modelled" and built.summary.best is not None and built.summary.best.trial.number == 1
    assert [c.trial.number for c in built.samples.cells] == [1, 0] and built.samples.cells[1].baseline
    assert built.search.plots is None and built.search.complete == (1, 0)  # 2 complete: too few to chart
    assert [line.trial for line in built.stopping.lines] == [1, 0] and built.winner is not None
    assert built.samples.real.png_base64 is None and "no image" in page_html(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.summary.metric = "KID"  # type: ignore[misc]
    assert normalised(page_html(built)) == normalised(render(study, storage_of(study), None))
