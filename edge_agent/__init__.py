"""The edge agent daemon that runs on each node or edge site.

``edge-agent run --config agent.yaml`` serves ``GET /metrics``, ``/healthz``, ``/readyz`` and
``POST /recommend`` (top-K nodes of the site for a pod, with the objective's terms), collects
node metrics with psutil, reads a cluster snapshot from Prometheus for load-aware scoring,
follows the global policy of a policy registry and records its decisions in a local sqlite
experience store. See ``docs/edge_agent.md``.
"""
