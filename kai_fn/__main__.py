import sys

from kai_fn.local.cli import main

sys.exit(main())
