"""`python -m modelserver [flags]`: the same as `deja modelserver [flags]`."""

from __future__ import annotations

import sys

from modelserver.cli import main

if __name__ == "__main__":
    sys.exit(main())
