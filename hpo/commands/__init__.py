"""What each CLI command does (the top layer): parse, call one function, print. May import
everything below."""
