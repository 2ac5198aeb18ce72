"""What only a workstation runs, for the tests and the demos: the API emulator, the function as a process, the event
source stand-ins, the chain testbed's harness, the pod watcher, and the two demos."""
from __future__ import annotations

import argparse


def add_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``python -m kai_fn demo [--real]``: the harness's one command, added to the operator's CLI."""
    d = sub.add_parser("demo", help="emulated cluster + real function server + the sample events",
                       description="kai_fn's whole loop with no cluster, in about a minute: an emulated API server "
                                   "seeded as Trainer and the policy leave it, the real function server, the sample "
                                   "events; every API call each event caused, what the cluster holds at the end, "
                                   "explain and status.")
    d.add_argument("--real", action="store_true",
                   help="the story on the real chain (testbed/, needs Go; builds the first time)")
    d.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    if args.real:
        from kai_fn.local.demo_real import run as run_real

        return run_real()
    from kai_fn.local.demo import run

    return run()
