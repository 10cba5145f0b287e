"""`python3 -m conveyor ...`: the conveyor command line (see conveyor.cli)."""
import sys

from .cli import main

sys.exit(main())
