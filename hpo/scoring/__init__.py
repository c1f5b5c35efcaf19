"""Scoring samples with clean-fid: FID and KID against cached reference statistics."""
