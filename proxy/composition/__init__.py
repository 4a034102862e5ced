"""The composition root: builds the immutable graph of parts and the aiohttp applications
(one process, edge front, edge worker) from a DejaConfig.

Layer: the top of the proxy, under proxy.cli alone; may import every other package."""
