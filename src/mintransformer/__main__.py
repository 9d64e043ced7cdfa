"""`python -m mintransformer ...`: the command line."""

import sys

from mintransformer.cli import main

sys.exit(main())
