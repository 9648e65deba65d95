"""``python -m edge_agent run --config agent.yaml``."""

import sys

from edge_agent.cli import main

sys.exit(main())
