"""The layering holds: each subpackage imports only the layers below it, read from the source (every
import, also inside functions) and checked at run time (importing a layer pulls in nothing above,
and the read commands pull in no torch)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent / "hpo"
BELOW = {
    "errors": set(),
    "files": set(),
    "outputs": {"errors", "files"},
    "spec": {"errors", "files"},
    "records": {"spec", "errors", "files"},
    "analysis": {"spec", "records", "errors", "files"},
    "diffusion": {"errors", "files"},
    "training": {"spec", "records", "diffusion", "errors", "files"},
    "tracking": {"spec", "training", "diffusion", "errors", "files"},
    "scoring": {"spec", "diffusion", "training", "records", "analysis", "errors", "files"},
    "doctor": {"spec", "diffusion", "training", "errors", "files"},
    "service": {
        "spec", "diffusion", "training", "scoring", "tracking", "records", "analysis", "outputs", "errors", "files",
    },
    "planning": {"doctor", "spec", "diffusion", "training", "errors", "files"},
    "companions": {
        "spec", "diffusion", "training", "scoring", "tracking", "service", "records", "analysis", "outputs", "errors",
        "files",
    },
    "run": {
        "planning", "doctor", "spec", "diffusion", "training", "scoring", "tracking", "service", "companions",
        "records", "analysis", "outputs", "errors", "files",
    },
    "report": {
        "run", "spec", "diffusion", "training", "scoring", "tracking", "service", "companions", "records", "analysis",
        "outputs", "errors", "files",
    },
}  # fmt: skip
TOP = {"commands", "cli", "__main__"}  # may import everything below; a command no other command (see the end)


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "hpo"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    return ".".join(p for p in rel.parts if p != "__init__")


def imports_of(path: Path, package: str = "hpo") -> set[str]:
    """Every module of ``package`` that ``path`` imports (also inside functions): ``from X import y`` as X."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == package}
    return found


def hpo_imports(path: Path) -> set[str]:
    return imports_of(path, "hpo")


def test_every_module_belongs_to_a_known_layer() -> None:
    layers = {layer_of(module_name(p)) for p in ROOT.rglob("*.py")}
    assert layers <= set(BELOW) | TOP | {"hpo"}, layers - set(BELOW) - TOP


@pytest.mark.parametrize("layer", sorted(BELOW))
def test_layer_imports_only_the_layers_below_it(layer: str) -> None:
    files = [ROOT / f"{layer}.py"] if (ROOT / f"{layer}.py").exists() else sorted((ROOT / layer).rglob("*.py"))
    wrong = []
    for path in files:
        for imported in hpo_imports(path):
            target = layer_of(imported)
            if target not in BELOW[layer] | {layer, "hpo"}:
                wrong.append(f"{path.relative_to(ROOT.parent)} imports {imported}")
    assert not wrong, wrong


def may_import(docstring: str) -> set[str]:
    """The layers a package's docstring says it may import: every ``hpo.X`` from "May import:" to the
    end of that sentence or a "Never"."""
    said = docstring.split("May import:", 1)[1]
    said = re.split(r"\.\s|\.$|Never", said, maxsplit=1)[0]
    return set(re.findall(r"``hpo\.(\w+)``", said))


@pytest.mark.parametrize("layer", sorted(name for name in BELOW if (ROOT / name / "__init__.py").exists()))
def test_each_package_docstring_names_the_layers_the_table_lets_it_import(layer: str) -> None:
    docstring = ast.get_docstring(ast.parse((ROOT / layer / "__init__.py").read_text())) or ""
    assert "May import:" in docstring, f"hpo/{layer}/__init__.py: no 'May import:' line"
    assert may_import(docstring) == BELOW[layer], f"hpo/{layer}/__init__.py says {sorted(may_import(docstring))}"


def test_importing_the_lower_layers_pulls_in_no_command_cli_or_report() -> None:
    lower = (
        "diffusion", "training", "scoring", "service", "spec", "doctor", "tracking", "companions", "planning", "run",
    )  # fmt: skip
    modules = [module_name(p) for layer in lower for p in sorted((ROOT / layer).rglob("*.py"))]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "above = (['hpo', 'commands'], ['hpo', 'cli'], ['hpo', 'report'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in above))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


HEAVY = ("torch", "torchvision", "hpo.training", "hpo.diffusion")
READ_COMMANDS = [
    "hpo.cli",  # imports each command's module inside its function
    "hpo.commands.status",
    "hpo.commands.narrow",
    "hpo.commands.report",
    "hpo.commands.export",  # reads the trial without torch; imports it where it reads and writes weights
    "hpo.service.study",  # find_trial: STUDY[:TRIAL] → the trial, for export and sample
]


def heavy_modules_after_import(modules: list[str]) -> list[str]:
    """Which of :data:`HEAVY` a fresh interpreter holds after importing ``modules`` (from this checkout)."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(json.dumps([h for h in {HEAVY!r} if any(m == h or m.startswith(h + '.') for m in sys.modules)]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    found: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_read_commands_import_no_torch() -> None:
    """hpo status, narrow, report and export's reading of a trial start in a second, not the four
    that torch and the training code take to import."""
    assert heavy_modules_after_import(READ_COMMANDS) == []


def test_the_torch_check_finds_torch_where_it_is_imported() -> None:
    assert {"torch", "hpo.training"} <= set(heavy_modules_after_import(["hpo.training.data"]))


def table_layers(row: str) -> tuple[list[str], str]:
    """A docs/architecture.md table row → (the layers it is about, its "may import" cell)."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    names = re.findall(r"`hpo/(\w+)(?:/|\.py)`", cells[0])
    return names, cells[-1]


def test_the_architecture_table_says_what_each_layer_may_import() -> None:
    """docs/architecture.md's "may import" column against ``BELOW``: ``X`` names a layer, "``X`` and below"
    adds what X may import, "every row above" every layer in the rows above it; errors and files are
    everyone's."""
    rows = [line for line in (ROOT.parent / "docs" / "architecture.md").read_text().splitlines()
            if line.startswith("| `hpo/")]  # fmt: skip
    common, above, wrong = {"errors", "files"}, set[str](), list[str]()
    for row in rows:
        names, cell = table_layers(row)
        said = set(re.findall(r"`(\w+)`", cell.split(";")[0]))
        for name in re.findall(r"`(\w+)` and below", cell):
            said |= BELOW[name]
        if "every row above" in cell:
            said |= above
        for name in (n for n in names if n in BELOW and n not in common):
            if said | common != BELOW[name] | common:
                wrong.append(
                    f"{name}: the table says {sorted(said - common)}, the imports allow {sorted(BELOW[name] - common)}"
                )
        above |= set(names)
    assert not wrong, wrong


# --- the top: commands stay a thin layer -----------------------------------------------------------------

MAX_COMMANDS_LINES = 1800  # hpo/commands/ in all
MAX_COMMAND_LINES = 250  # any one command module


def command_imports(commands: Path) -> list[str]:
    """``commands/X.py imports hpo.commands.Y`` for each command module that imports another (a command
    parses, calls one function below and prints; what two commands share lives below them)."""
    return [
        f"commands/{path.name} imports {imported}"
        for path in sorted(commands.glob("*.py"))
        for imported in sorted(imports_of(path))
        if imported == "hpo.commands" or imported.startswith("hpo.commands.")
    ]


def importers_of(folder: Path, package: str) -> list[str]:
    """``X.py imports P.Y`` for each module under ``folder`` that imports from ``package``."""
    return [
        f"{path.relative_to(folder.parent)} imports {imported}"
        for path in sorted(folder.rglob("*.py"))
        for imported in sorted(imports_of(path, package.split(".")[0]))
        if imported == package or imported.startswith(package + ".")
    ]


def oversized(commands: Path, *, total: int = MAX_COMMANDS_LINES, each: int = MAX_COMMAND_LINES) -> list[str]:
    """What makes ``commands`` more than a thin layer: a module over ``each`` lines, ``total`` in all."""
    sizes = {path.name: len(path.read_text().splitlines()) for path in sorted(commands.glob("*.py"))}
    found = [f"commands/{name}: {n} lines (at most {each})" for name, n in sizes.items() if n > each]
    if sum(sizes.values()) >= total:
        found.append(f"commands/: {sum(sizes.values())} lines (under {total})")
    return found


def test_no_command_imports_another_command() -> None:
    assert command_imports(ROOT / "commands") == []


def test_the_benchmarks_import_no_command_and_no_test_imports_a_benchmark() -> None:
    assert importers_of(ROOT.parent / "benchmarks", "hpo.commands") == []
    assert importers_of(ROOT.parent / "tests", "benchmarks") == []


def test_the_commands_stay_thin() -> None:
    assert oversized(ROOT / "commands") == []


def test_the_top_rules_report_a_planted_violation(tmp_path: Path) -> None:
    """The checks above can fail: a copy of hpo/commands with a command that imports another (inside a
    function, as the old ones did) and grew past the limit, a benchmark that imports a command, a test
    that imports a benchmark."""
    commands = tmp_path / "hpo" / "commands"
    shutil.copytree(ROOT / "commands", commands)
    planted = "def show() -> None:\n    from hpo.commands.status import status_text\n" + "\n" * MAX_COMMAND_LINES
    (commands / "planted.py").write_text(planted)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bench.py").write_text("from hpo.commands import launch\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("import benchmarks.bench\n")
    assert command_imports(commands) == ["commands/planted.py imports hpo.commands.status"]
    assert importers_of(tmp_path / "benchmarks", "hpo.commands") == ["benchmarks/bench.py imports hpo.commands"]
    assert importers_of(tmp_path / "tests", "benchmarks") == ["tests/test_x.py imports benchmarks.bench"]
    assert oversized(commands) == [f"commands/planted.py: {MAX_COMMAND_LINES + 2} lines (at most 250)"]
    lines = sum(len(p.read_text().splitlines()) for p in commands.glob("*.py"))
    assert oversized(commands, total=100)[-1] == f"commands/: {lines} lines (under 100)"


def class_names(paths: list[Path]) -> dict[str, list[str]]:
    """Each class name defined at a module's top level → the modules that define it."""
    found: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(str(path.relative_to(path.parents[1])))
    return found


def test_each_class_name_means_one_thing() -> None:
    twice = {name: where for name, where in class_names(sorted(ROOT.rglob("*.py"))).items() if len(where) > 1}
    assert not twice, f"class names defined more than once: {twice}"


def test_the_class_name_check_finds_a_name_defined_twice(tmp_path: Path) -> None:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("class CurvePoint:\n    pass\n")
    assert len(class_names(sorted(tmp_path.glob("*.py")))["CurvePoint"]) == 2
