"""Deja: normalize."""
