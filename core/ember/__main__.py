"""`python -m ember`: the `ember` command (core/ember/cli.py)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
