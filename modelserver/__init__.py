"""Deja: modelserver."""
