"""Deja: core."""
