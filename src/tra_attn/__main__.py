"""``python -m tra_attn`` runs the ``tra`` command."""

import sys

from .cli import main

sys.exit(main())
