"""The read side: what a study's runs conclude (pure functions of their scores; no storage, no torch)."""
