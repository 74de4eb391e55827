"""`python -m harness` is `nvbench`."""

import sys

from harness.cli import main

sys.exit(main())
