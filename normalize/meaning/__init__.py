"""Meaning analysis (English): lemma skeletons, meaning signatures, roles, quantities, the
language gate, and the guards that decide whether one prompt's answer may serve another.

Pure functions over spaCy documents; imports normalize.keys and core."""
