"""Wire formats: one encoder and one typed decoder per format that crosses a process or a
file. The agent's JSON (:mod:`.agent`), the hub's cluster payload for the dashboard
(:mod:`.cluster`), the hub's drains file (:mod:`.drains`), the culler's deadlines, notes and
share notices files (:mod:`.deadlines`, :mod:`.cull_notes`, :mod:`.share_notices`), and the
admin's YAML files: nodes, declared inventories, the catalog (:mod:`.nodes_file`,
:mod:`.declared_inventory`, :mod:`.catalog_file`, the YAML parsed by :mod:`.adminfiles`).
What comes in is untrusted until decoded here. Pure: no file is read or written here
(``jupyterhub_gpu.edges.files`` and ``.adminfiles`` do that; tests/unit/test_layers.py
checks).

Imports: ``core``, ``wire`` and ``errors``.
"""
