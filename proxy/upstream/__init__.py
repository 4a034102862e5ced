"""The upstream client: the client to the model, its retries and timeouts (client.py), the
transport seam it sends through and the aiohttp transport behind it (aiohttp_transport.py).

Layer: beside tiers, below proxy.answering; imports only core."""
