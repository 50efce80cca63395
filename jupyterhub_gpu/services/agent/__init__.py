"""The node agent: reads a GPU host's inventory through a probe and serves it to the hub
(JSON) and to Prometheus (metrics). See :mod:`.app` and ``docs/agent.md``."""
