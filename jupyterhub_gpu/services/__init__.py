"""The separate processes, one package each: the node agent (:mod:`.agent`), the idle
culler (:mod:`.culler`), the dashboard (:mod:`.dashboard`) and the usage API
(:mod:`.usage`), on one small shared base (:mod:`.base`).

Imports: ``core``, ``wire``, ``edges``, ``errors``, :mod:`.base` and the service's own
package; never ``hub`` or another service.
"""
