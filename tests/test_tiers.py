"""The suite's tiers (tests/tiers.py): a folder decides a test's tier, plain pytest runs the default
tier only, and a default-tier test that runs past the limit fails naming where it belongs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tiers import FOLDERS, TESTS, tier_of

pytest_plugins = ["pytester"]

PLANTED = """
import time

def test_quick():
    pass

def test_slow():
    time.sleep(0.6)
"""


def planted_suite(pytester: pytest.Pytester) -> None:
    """A copy of the layout run with the real plugin (tests/tiers.py copied in): one quick and one
    slow test in the default tier, one test in each other tier."""
    tests = pytester.mkpydir("tests")
    (tests / "tiers.py").write_text((TESTS / "tiers.py").read_text())
    (pytester.path / "conftest.py").write_text('pytest_plugins = ["tests.tiers"]\n')
    (tests / "test_default.py").write_text(PLANTED)
    for tier in FOLDERS:
        folder = tests / tier
        folder.mkdir()
        (folder / "__init__.py").write_text("")
        (folder / f"test_{tier}.py").write_text("import time\n\ndef test_here():\n    time.sleep(0.6)\n")


def test_every_test_file_lies_in_a_tier_folder_or_the_default_tier() -> None:
    """A test file in any other folder would run in the default tier unnoticed (``tier_of`` falls back to
    it), so the default tier is the files directly in tests/."""
    files = list(TESTS.rglob("test_*.py"))
    stray = [p for p in files if p.parent != TESTS and tier_of(p) == "default"]
    assert not stray, f"test files outside tests/ and its tier folders ({', '.join(FOLDERS)}): {stray}"
    tiers = {tier_of(p) for p in files}
    assert tiers == {"default", "integration", "e2e", "deploy"}
    assert tier_of(TESTS / "integration" / "test_outages.py") == "integration"
    assert tier_of(TESTS / "test_spec.py") == "default"


def test_plain_pytest_runs_the_default_tier_and_fails_a_test_past_the_limit(pytester: pytest.Pytester) -> None:
    planted_suite(pytester)
    result = pytester.runpytest_subprocess("-o", "tier_time_limit=0.3", "tests")
    result.assert_outcomes(passed=1, failed=1, deselected=3)
    result.stdout.fnmatch_lines(
        ["*test_slow: call took 0.* s, over the default tier's 0.3 s: make it cheaper or move*"]
    )


def test_tier_all_runs_every_folder_and_only_the_default_tier_has_a_limit(pytester: pytest.Pytester) -> None:
    planted_suite(pytester)
    result = pytester.runpytest_subprocess("-o", "tier_time_limit=0.3", "--tier", "all", "tests")
    result.assert_outcomes(passed=4, failed=1)  # the other tiers' 0.6 s tests pass
    named = pytester.runpytest_subprocess("-o", "tier_time_limit=0.3", "tests/e2e")
    named.assert_outcomes(passed=1)  # a path inside a tier's folder selects that tier by itself
    wrong = pytester.runpytest_subprocess("--tier", "nightly", "tests")
    assert wrong.ret != 0 and "unknown tier ['nightly']" in wrong.stderr.str()


def test_the_repository_layout_has_the_three_tier_folders() -> None:
    assert all((Path(folder) / "__init__.py").exists() for folder in FOLDERS.values())


def test_the_tests_readme_lists_every_test_file_under_its_tier() -> None:
    text = (TESTS / "README.md").read_text()
    sections = {chunk.split(" ")[0]: chunk for chunk in text.split("\n### ")[1:]}
    for path in TESTS.rglob("test_*.py"):
        name = f"`{path.relative_to(TESTS.parent)}`"
        assert name in sections[tier_of(path)], (
            f"{name} is not listed under its tier ({tier_of(path)}) in tests/README.md"
        )


def test_every_other_tier_collects_and_every_fixture_it_asks_for_exists(pytester: pytest.Pytester) -> None:
    """The default tier cannot run the other tiers, but it can plan them: a fixture a moved test
    still asks for from the file it left (a CI failure once) is an error in the plan, found here in
    seconds instead of after 19 minutes of the integration tier. In-process: the modules are loaded."""
    root = TESTS.parent
    tiers = [str(TESTS / tier) for tier in FOLDERS]
    result = pytester.runpytest_inprocess(
        "--rootdir", str(root), "-c", str(root / "pyproject.toml"), "--tier", "all", "--setup-plan", "-q",
        "-p", "no:cacheprovider", *tiers,
    )  # fmt: skip
    errors = [line for line in result.outlines if line.startswith("ERROR") or "fixture '" in line]
    assert result.ret == 0 and not errors, "\n".join(result.outlines[-40:])
