import sys

from kai_fn.cli import main

sys.exit(main())
