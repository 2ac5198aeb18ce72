import sys

from kai_fn.commands.cli import main
from kai_fn.local import add_demo

sys.exit(main(extra=[add_demo]))
