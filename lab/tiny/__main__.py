"""``python -m lab.tiny DEST [--variant ...]``: build a tiny loadable checkpoint."""

import sys

from lab.tiny import main

raise SystemExit(main(sys.argv[1:]))
