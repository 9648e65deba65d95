"""The edge agent daemon that runs on each node or edge site.

Not built yet: it arrives with the edge-agent issue (metrics collection, ``POST /recommend``,
local experience store, federated participation). The package exists so the layout and the
packaging are in their final shape.
"""
