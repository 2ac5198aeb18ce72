"""``python -m kai_fn``: the operator's commands (kai_fn.commands.cli), and in a checkout the demo too. The installed
package has no kai_fn.local, and the ``kai-fn`` and ``kubectl-kai_fn`` entry points never import it."""
import importlib.util
import sys

from kai_fn.commands.cli import main

extra = []
if importlib.util.find_spec("kai_fn.local") is not None:
    from kai_fn.local import add_demo

    extra.append(add_demo)
sys.exit(main(extra=extra, prog="python -m kai_fn"))
