"""Deja: proxy."""
