"""Deja: fallback."""
