"""`python -m sgc_trace [export|plan|report] ...`: the `sgc-trace` command."""

import sys

from .tools.cli import main

sys.exit(main())
