"""Deja: tiers."""
