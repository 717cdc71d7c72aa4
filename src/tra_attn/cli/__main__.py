"""``python -m tra_attn.cli`` runs the ``tra`` command, as ``python -m tra_attn`` does (the benchmarks use it)."""

import sys

from . import main

sys.exit(main())
