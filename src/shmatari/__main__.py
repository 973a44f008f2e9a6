"""``python -m shmatari``: the ``shmatari`` command (:mod:`shmatari.cli`),
for an environment whose scripts folder is not on ``PATH``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
