"""The suite's tiers (tests/tiers.py), registered here at the root so that ``--tier`` is known before
pytest looks at the command line's paths (``--tier deploy`` would otherwise read as the folder deploy/)."""

pytest_plugins = ["tests.tiers"]
