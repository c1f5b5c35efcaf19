"""The suite's tiers, decided by directory so nobody has to remember a marker.

- default: everything under ``tests/`` outside the folders below, laid out like ``hpo/``: a module's
  tests lie in the folder named after its sub-package (``hpo/spec/`` in ``tests/spec/``). Unit tests and
  in-process real parts (a tiny UNet on 8-px data, SQLite, an in-process worker, the CLI through its
  runner). ``pytest`` and ``make test`` run it; each test must finish within ``tier_time_limit``
  seconds (ini option, default 20), else it fails with a line naming where it belongs.
- integration: ``tests/integration/``: a real PostgreSQL server, worker processes, the CLI as a
  process, outages.
- e2e: ``tests/e2e/``: the shipped specs at full size, the docs walk-through, Chromium, trackers.
- deploy: ``tests/deploy/``: containers, Slurm, Kubernetes manifests.

``pytest --tier all`` (``make test-all``, what CI runs) takes every tier; ``--tier integration,e2e``
some. A path given on the command line inside a tier's folder selects that tier by itself.

Where a test file may lie (``misplaced`` lists the ones that do not; tests/test_tiers.py fails on them):
in a tier's folder, at any depth; in a default-tier folder whose path below ``tests/`` is a package of
``hpo/`` (``tests/spec/``; ``tests/foo/`` without ``hpo/foo/`` is misplaced); or directly in ``tests/``
when it is one of ``CROSS_CUTTING``, the few that test the project as a whole rather than one
sub-package: the layering across every package (``test_layers.py``), the docs against the CLI
(``test_docs.py``), the suite's own tiers (``test_tiers.py``) and the habits every command shares
(``test_cli_conventions.py``). Helper modules (no ``test_`` prefix) stay directly in ``tests/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent
TIERS = ("default", "integration", "e2e", "deploy")
FOLDERS = {tier: TESTS / tier for tier in TIERS[1:]}
PACKAGE = TESTS.parent / "hpo"
CROSS_CUTTING = ("test_cli_conventions.py", "test_docs.py", "test_layers.py", "test_tiers.py")
WHERE = "tests/integration/ (servers, processes, outages) or tests/e2e/ (full-size networks, docs walk-through)"
SETUP_FACTOR = 3  # a fixture shared by a module or the session may take this many times the limit


def tier_of(path: Path, tests: Path = TESTS) -> str:
    for tier in TIERS[1:]:
        if path.is_relative_to(tests / tier):
            return tier
    return "default"


def default_folders(package: Path = PACKAGE) -> list[str]:
    """The folders below tests/ the default tier may use: one per package of hpo/, as its path below it."""
    return sorted(init.parent.relative_to(package).as_posix() for init in package.rglob("*/__init__.py"))


def misplaced(tests: Path = TESTS, package: Path = PACKAGE) -> list[Path]:
    """The test files under ``tests`` that lie in no tier (the rule is in this module's docstring)."""
    allowed = set(default_folders(package))
    stray = []
    for path in sorted(tests.rglob("test_*.py")):
        if tier_of(path, tests) != "default":
            continue
        folder = path.parent.relative_to(tests).as_posix()
        if folder == ".":
            if path.name not in CROSS_CUTTING:
                stray.append(path)
        elif folder not in allowed:
            stray.append(path)
    return stray


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        default=None,
        help="tiers to run, comma-separated (default, integration, e2e, deploy) or 'all'; default: the default "
        "tier, or the tiers of the paths given",
    )
    parser.addini("tier_time_limit", "seconds a default-tier test may take", default="20")


def chosen_tiers(config: pytest.Config) -> set[str]:
    option = config.getoption("--tier")
    if option:
        names = {t.strip() for t in option.split(",") if t.strip()}
        if "all" in names:
            return set(TIERS)
        unknown = names - set(TIERS)
        if unknown:
            raise pytest.UsageError(f"unknown tier {sorted(unknown)}; expected some of {', '.join(TIERS)} or all")
        return names
    named = {tier_of(Path(arg.split("::")[0]).resolve()) for arg in config.args if Path(arg.split("::")[0]).exists()}
    return {"default"} | named


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers = chosen_tiers(config)
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        tier = tier_of(item.path)
        item.user_properties.append(("tier", tier))
        (keep if tier in tiers else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if tier_of(item.path) != "default" or report.failed or call.when == "teardown":
        return
    limit = float(item.config.getini("tier_time_limit"))
    allowed = limit if call.when == "call" else SETUP_FACTOR * limit
    if report.duration > allowed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid}: {call.when} took {report.duration:.1f} s, over the default tier's {allowed:g} s: "
            f"make it cheaper or move it to {WHERE}"
        )
