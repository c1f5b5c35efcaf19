"""What each CLI command does (the top layer): parse, call one function below, print. May import
everything below, never another command module (tests/test_layers.py checks it)."""
