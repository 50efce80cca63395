"""Wire formats: one encoder and one typed decoder per format that crosses a process or a
file. The agent's JSON (:mod:`.agent`), the hub's cluster payload for the dashboard
(:mod:`.cluster`), the culler's deadlines and notes files (:mod:`.deadlines`,
:mod:`.cull_notes`), and the admin's YAML files: nodes, declared inventories, the catalog
(:mod:`.nodes_file`, :mod:`.declared_inventory`, :mod:`.catalog_file`, read through
:mod:`.adminfiles`). Anything read here is untrusted until decoded.

Imports: ``core``, ``wire`` and ``errors``.
"""
