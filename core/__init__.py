"""Deja's core: the one error tree, the configuration and its loader, the clock, ids, the
recorder every layer counts into, the tracing seam, event-loop turns.

Layer: the bottom; every package may import it, and it imports nothing of Deja's."""
