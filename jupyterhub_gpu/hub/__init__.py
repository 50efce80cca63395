"""What runs inside the JupyterHub process: the spawner (:mod:`.spawner`) and its GPU
admission (:mod:`.admission`), the hub's view of its nodes (:mod:`.cluster`), the GPU
ledger (:mod:`.ledger`), the spawn queue (:mod:`.queue`), image pulls (:mod:`.pull`), the
accounting recorder (:mod:`.recorder`) and Prometheus series (:mod:`.metrics`), saves
(:mod:`.saves`), the authenticators (:mod:`.auth`), the hub API extensions and their page
templates (:mod:`.api`, ``templates/``), the site's ``configure`` calls
(:mod:`.extensions`) and :mod:`.runtime`, the one object that holds the cluster for the
whole process and that handlers reach through tornado's settings.

Imports: anything in the package except ``services`` and ``cli``.
"""
