#!/usr/bin/env python
"""Scheduler-extender throughput at 5,000 nodes over real HTTP (filter / prioritize, both
nodeCacheCapable modes) and the custom scheduler's bind rate; see ``iro_fed.k8s.bench``."""

import sys

from iro_fed.k8s.bench import main

if __name__ == "__main__":
    sys.exit(main())
