"""What each CLI command does, kept out of ``cli.py`` so the CLI holds no logic."""
