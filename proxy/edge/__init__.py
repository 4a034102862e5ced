"""Edge mode: the front process that answers exact hits, its worker process, the relay and
the report between them.

Layer: above proxy.http (the front serves hits with the same reader and writer); may import
everything below it, never proxy.composition or proxy.cli."""
