"""``python -m claw``: the claw command."""

import sys

from ._cli import main

sys.exit(main())
