"""Kubernetes integration: cluster snapshot, scheduler extender, admission webhook, secondary
scheduler with leader election, feedback loop (docs/kubernetes.md).

Modules import the ``kubernetes`` client (extra ``k8s``) only inside the functions that talk to
an API server, so ``iro --help`` and the snapshot work without it.

* :mod:`iro_fed.k8s.quantity`: exact Kubernetes quantities;
* :mod:`iro_fed.k8s.snapshot`: Kubernetes JSON -> :class:`iro_fed.model.Problem`;
* :mod:`iro_fed.k8s.client`: API calls and list+watch reflectors through the official client;
* :mod:`iro_fed.k8s.extender`, :mod:`iro_fed.k8s.webhook`, :mod:`iro_fed.k8s.scheduler`: the servers;
* :mod:`iro_fed.k8s.leader`: Lease-based leader election;
* :mod:`iro_fed.k8s.feedback`: predicted vs observed outcome, drift, fine-tuning;
* :mod:`iro_fed.k8s.testing`: the loopback API server the tests (and local trials) use;
* :mod:`iro_fed.k8s.bench`: loopback load benchmark of the extender.
"""
