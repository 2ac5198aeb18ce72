"""kai-fn: gang scheduling for Kubeflow Trainer TrainJobs on KAI Scheduler, from the operator's side.

See which TrainJobs kai_fn holds, blocks or waits on and why (``status``, ``explain``), release held ones without a
gang (``release``), plan a TrainJob from files (``plan``), and post a sample event to a running function
(``invoke``). Installed, it is also the kubectl plugin ``kubectl kai-fn``."""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeAlias

import yaml

from kai_fn import __version__
from kai_fn import plan_inputs
from kai_fn.commands import plan_files, plan_view
from kai_fn.commands.terminal import visible, visible_lines
from kai_fn.core import keys
from kai_fn.core.models import InputError, Runtime, TrainJob, parse
from kai_fn.core.plan import Plan
from kai_fn.core.state import PHASES
from kai_fn import settings as settings_mod

EXIT_OK, EXIT_BLOCKED, EXIT_INPUT = 0, 1, 2


class UsageError(Exception):
    """Unusable input: printed as one line naming the file, line or field path."""


def load_document(path: str) -> dict[str, Any]:
    """One YAML or JSON object from a file, or a UsageError that says where it went wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"{path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise UsageError(f"{path}{where}: not valid YAML or JSON: {error.problem}") from None
    except yaml.YAMLError as error:
        raise UsageError(f"{path}: not valid YAML or JSON: {error}") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise UsageError(f"{path}: expected exactly one object, found {len(docs)} document(s)")
    return docs[0]


def _read(path: str, model: type[TrainJob] | type[Runtime], doc: dict[str, Any] | None = None) -> Any:
    try:
        return parse(model, load_document(path) if doc is None else doc)
    except InputError as error:
        raise UsageError(f"{path}: {error}") from None


PREVIEW_UID = "uid"


def _trainjob_document(path: str) -> tuple[dict[str, Any], str | None]:
    """The TrainJob file, and a note when it has no uid yet (not submitted): ``uid`` stands in for the one the API
    server will give it, which names its PodGroup."""
    doc = load_document(path)
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or meta.get("uid"):
        return doc, None
    name = meta.get("name", "NAME")
    return {**doc, "metadata": {**meta, "uid": PREVIEW_UID}}, (
        f"{path} has no metadata.uid (not submitted yet): the names below use '{PREVIEW_UID}' for the uid the API "
        f"server will give it; its PodGroup will be named pg-{name}-<that uid>")


def plan_report(result: Plan, jobset: dict[str, Any] | None, trainjob: dict[str, Any],
                resume_setting: bool = True, now: datetime.datetime | None = None) -> dict[str, Any]:
    """What ``plan`` prints; with the live JobSet, the whole JSON Patch the function would apply to it now."""
    report: dict[str, Any] = {"plan": plan_view.summary(result)}
    if result.podgroup:
        report["podGroup"] = result.podgroup
    if result.stage_podgroups:
        report["stagePodGroups"] = list(result.stage_podgroups)
    if result.pod_templates:
        report["podTemplates"] = {
            c.replicated_job: {"labels": c.labels, "annotations": c.annotations} for c in result.pod_templates
        }
    if result.jobset_annotations:
        report["jobSetAnnotations"] = result.jobset_annotations
    problems = [str(p) for p in result.problems]
    if jobset is not None and result.actionable:
        patch, problem = plan_view.jobset_patch_of(result, trainjob, jobset, resume_setting,
                                                   now or datetime.datetime.now(datetime.UTC))
        report["jobSetPatch"] = patch
        problems += [problem] if problem else []
    if problems:
        report["problems"] = problems
    return report


def cmd_plan(args: argparse.Namespace) -> int:
    trainjob, preview = _trainjob_document(args.trainjob)
    _read(args.trainjob, TrainJob, trainjob)
    runtime = load_document(args.runtime)
    _read(args.runtime, Runtime, runtime)
    jobset = load_document(args.jobset) if args.jobset else None
    files, config = _plan_files(args, runtime)
    try:
        found = plan_inputs.planned(files, config, trainjob)
        if not isinstance(found, Plan):
            raise UsageError(f"{args.runtime}: {getattr(found, 'error', found)}")
        result = found
        report = ({"preview": preview} if preview else {}) | plan_report(result, jobset, trainjob, config.resume)
    except plan_view.Mismatch as error:
        raise UsageError(f"{args.jobset}: {error}") from None
    if args.output == "json":
        _say(json.dumps(report, indent=2))
    else:
        _say(yaml.safe_dump(report, sort_keys=False), end="")
    if result.blocked:  # for a script that reads stderr only: why, in one line
        print(f"error: {args.trainjob}: blocked: " + "; ".join(str(p) for p in result.problems if p.blocking),
              file=sys.stderr)
    return EXIT_BLOCKED if result.blocked else EXIT_OK


def _plan_files(args: argparse.Namespace, runtime: dict[str, Any]) -> tuple[plan_files.Files, settings_mod.Settings]:
    """What ``plan`` reads instead of a cluster, and the settings: KAI's defaults ConfigMap given is the configured
    one."""
    topologies = {}
    for path in args.topology or ():
        doc = load_document(path)
        name = (doc.get("metadata") or {}).get("name")
        if doc.get("kind") != keys.TOPOLOGY_KIND or not isinstance(name, str):
            raise UsageError(f"{path}: expected a {keys.KAI_TOPOLOGY_API} Topology with metadata.name")
        topologies[name] = doc
    classes = [_named(path, "PriorityClass") for path in args.priority_class] if args.priority_class else None
    defaults = _named(args.kai_defaults, "ConfigMap") if args.kai_defaults else None
    overrides = {"KAI_PODGROUP_FLAVOR": args.flavor} if args.flavor else {}
    if defaults is not None:
        where = defaults.get("metadata") or {}
        overrides["KAI_DEFAULTS_CONFIGMAP"] = f"{where.get('namespace') or 'kai-scheduler'}/{where['name']}"
    return plan_files.Files(runtime, topologies, classes, defaults), settings_mod.load(**overrides)


def _named(path: str, kind: str) -> dict[str, Any]:
    doc = load_document(path)
    if doc.get("kind") != kind or not isinstance((doc.get("metadata") or {}).get("name"), str):
        raise UsageError(f"{path}: expected a {kind} with metadata.name")
    return doc


# argparse's action is generic only to type checkers (not subscriptable at run time on Python 3.11).
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
AddCommand: TypeAlias = Callable[[Subcommands], None]

DESCRIPTION = """\
Gang scheduling for Kubeflow Trainer TrainJobs on KAI Scheduler, by the kai_fn function:
see which TrainJobs it holds, blocks or waits on and why, and release held ones."""
EPILOG = """\
cluster access is kubectl's: --kubeconfig, --context, -n/--namespace and -A/--all-namespaces,
before or after the command. As a kubectl plugin they follow the plugin's name:
  kubectl kai-fn status -A --context prod
  kubectl kai-fn explain -n team-a llama-finetune
  kubectl kai-fn release --held -n team-a --yes --reason 'kai-fn is down (INC-42)'"""


def build_parser(extra: Sequence[AddCommand] = (), prog: str = "kai-fn") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _cluster_access(parser, top=True, namespace="for status, explain and release (see their --help)",
                    everywhere="for status and release --held")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_status, _add_explain, _add_release, _add_plan, _add_invoke, *extra):
        add(sub)
    return parser


def _add_status(sub: Subcommands) -> None:
    """`status`: every TrainJob in scope, one line each."""
    s = sub.add_parser("status", help="every TrainJob in kai_fn's scope, one line each: held, blocked, waiting, ...",
                       description="Every TrainJob in kai_fn's scope, one line each, what needs attention first. "
                                   "Exit 1 when one has been held longer than --held-for, or is in a state "
                                   "--fail-on names; 2 for bad input or no cluster.")
    _cluster_access(s, namespace="one namespace (default: all)", everywhere="every namespace (the default)")
    s.add_argument("--held-for", default="2m", metavar="DURATION",
                   help="exit 1 when a TrainJob has been held longer than this (default: %(default)s)")
    s.add_argument("--fail-on", metavar="STATE[,STATE]", type=_states, default=(),
                   help="exit 1 also when a TrainJob is in one of these states (for a cron job or CI), e.g. "
                        f"blocked,timed-out; any of: {', '.join(PHASE_NAMES)}")
    s.add_argument("-o", "--output", choices=["text", "wide", "json"], default="text",
                   help="text (default), wide (with the PodGroup, reasons unabridged) or json")
    _flavor(s)
    s.add_argument("--heartbeat", metavar="NAMESPACE/NAME",
                   help="the function's heartbeat Lease (default: KAI_FN_HEARTBEAT_LEASE or kai-fn/kai-fn-resync)")
    s.set_defaults(func=cmd_status)


def _add_explain(sub: Subcommands) -> None:
    """`explain NAMESPACE/NAME`: why one gang waits."""
    e = sub.add_parser("explain", help="why one TrainJob's gang waits, read-only from the live cluster",
                       description="Why one TrainJob's gang waits: its plan, what exists, what KAI says, what to do. "
                                   "Exit 0 bound or progressing, 1 blocked.")
    e.add_argument("trainjob", metavar="NAMESPACE/NAME", help="or NAME with -n NAMESPACE")
    _cluster_access(e, namespace="the TrainJob's namespace, when it is named NAME alone", everywhere=None)
    _flavor(e)
    e.add_argument("-o", "--output", choices=["text", "json"], default="text", help="text (default) or json")
    e.set_defaults(func=cmd_explain)


def _add_release(sub: Subcommands) -> None:
    """`release`: held TrainJobs let go without a gang, with who and why."""
    r = sub.add_parser("release", help="release held TrainJobs without a gang (an operator's way out; --yes to act)",
                       description="Release held TrainJobs without a gang, recording who and why in an Event on "
                                   "each. Without --yes, print what would be released and exit 1.")
    r.add_argument("trainjobs", nargs="*", metavar="NAMESPACE/NAME", help="held or blocked TrainJobs, by name")
    r.add_argument("--held", action="store_true", help="every held TrainJob of -n NAMESPACE or -A")
    r.add_argument("--yes", action="store_true", help="do it; without, print what would be released and exit 1")
    r.add_argument("--reason", metavar="TEXT", help="why, recorded in the Event on each TrainJob (needed with --yes)")
    _cluster_access(r, namespace="with --held: its namespace", everywhere="with --held: every namespace")
    _flavor(r)
    r.set_defaults(func=cmd_release)


def _add_plan(sub: Subcommands) -> None:
    """`plan`: what kai_fn would write for a TrainJob, from files."""
    p = sub.add_parser("plan", help="print the PodGroup, pod-template changes and JobSet patch for a TrainJob, "
                                    "from files",
                       description="What kai_fn would write for a TrainJob, from files, without a cluster: its "
                                   "PodGroups, the pod-template changes, with --jobset the JSON Patch of the JobSet, "
                                   "and any problems. Exit 0 planned (or out of scope), 1 blocked (the problems also "
                                   "on stderr, in one line), 2 unusable input (one line naming the file and field).")
    p.add_argument("--trainjob", required=True, metavar="FILE",
                   help="the TrainJob, as submitted or as read back (YAML or JSON); without metadata.uid, a "
                        "stand-in is used and said so")
    p.add_argument("--runtime", required=True, metavar="FILE", help="its TrainingRuntime or ClusterTrainingRuntime")
    p.add_argument("--jobset", metavar="FILE", help="the live JobSet, to print the JSON Patch for it")
    p.add_argument("--topology", metavar="FILE", action="append",
                   help="a KAI Topology the TrainJob names, to check its levels (repeatable)")
    p.add_argument("--priority-class", metavar="FILE", action="append",
                   help="a PriorityClass that exists (repeatable); without any, every class named is taken to exist")
    p.add_argument("--kai-defaults", metavar="FILE",
                   help="KAI's defaults ConfigMap (its per-kind priority and preemptibility), as the cluster has it")
    _flavor(p)
    p.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml", help="yaml (default) or json")
    p.set_defaults(func=cmd_plan)


def _add_invoke(sub: Subcommands) -> None:
    """`invoke SAMPLE`: one sample event posted to a running function."""
    i = sub.add_parser("invoke", help="POST a sample event in binary mode to a running function",
                       description="POST one sample event, as Knative's ApiServerSource sends it (binary mode), to a "
                                   "running function, and print its answer. Exit 0 on 2xx, 1 on another status, 2 "
                                   "for an unreadable sample or no answer.")
    i.add_argument("sample", metavar="SAMPLE", help="an event in the adapter's wire format, e.g. from samples/events")
    i.add_argument("--url", default="http://127.0.0.1:8080", help="the function's address (default: %(default)s)")
    i.set_defaults(func=cmd_invoke)


def _cluster_access(p: argparse.ArgumentParser, top: bool = False, namespace: str | None = None,
                    everywhere: str | None = "every namespace") -> None:
    """kubectl's flags, on the top parser and again on each command that talks to a cluster, so they may come before
    or after it. A command's copies default to SUPPRESS: given only before it, the top parser's value stands."""
    unset = None if top else argparse.SUPPRESS
    g = p.add_argument_group("cluster access (as kubectl)")
    g.add_argument("--kubeconfig", metavar="PATH", default=unset,
                   help="default: KUBECONFIG, ~/.kube/config, or in a cluster its service account")
    g.add_argument("--context", metavar="NAME", default=unset, help="a context of the kubeconfig (default: its "
                                                                     "current-context)")
    g.add_argument("-n", "--namespace", metavar="NAMESPACE", default=unset, help=namespace)
    if top or everywhere:
        g.add_argument("-A", "--all-namespaces", action="store_true", default=False if top else argparse.SUPPRESS,
                       help=everywhere)


PHASE_NAMES = tuple(str(p) for p in PHASES)


def _states(text: str) -> tuple[str, ...]:
    """``--fail-on``'s value: states of ``status``, comma-separated."""
    states = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = [s for s in states if s not in PHASE_NAMES]
    if unknown or not states:
        raise argparse.ArgumentTypeError(f"{text!r}: expected states among {', '.join(PHASE_NAMES)}")
    return states


def _flavor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--flavor", choices=["kai", "scheduler-plugins"], help="default: KAI_PODGROUP_FLAVOR or kai")


def _settings(args: argparse.Namespace) -> settings_mod.Settings:
    overrides = {"KAI_PODGROUP_FLAVOR": args.flavor} if args.flavor else {}
    return settings_mod.load(**overrides)


def _with_cluster(error: Exception, args: argparse.Namespace) -> str:
    """The error's line; when the API server did not answer, with the server and the kubeconfig context asked."""
    from kai_fn.commands.status import Unreachable

    if not isinstance(error, Unreachable):
        return str(error)
    return f"{error} (API server {_server(args)}, context {_context(args)})"


def _server(args: argparse.Namespace) -> str:
    from kai_fn.kube import NoClusterConfig, api_client

    try:
        return str(api_client(args.kubeconfig, args.context).configuration.host)
    except NoClusterConfig:
        return "unknown"


def _context(args: argparse.Namespace) -> str:
    import os

    from kai_fn.kube.client import current_context

    if args.context:
        return str(args.context)
    if args.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "in-cluster (its service account)"
    return current_context(args.kubeconfig) or "unknown"


def cmd_status(args: argparse.Namespace) -> int:
    """Exit 0 nothing held longer than --held-for, 1 something is, 2 bad input or no cluster."""
    from kai_fn.commands.status import Unusable, run

    try:
        code, out, err = run(None if args.all_namespaces else args.namespace, args.kubeconfig, args.output,
                             args.held_for, args.heartbeat, _settings(args), context=args.context,
                             fail_on=args.fail_on)
    except Unusable as error:
        raise UsageError(_with_cluster(error, args)) from None
    _say(out)
    if err:
        _say(err, file=sys.stderr)
    return code


def cmd_release(args: argparse.Namespace) -> int:
    """Exit 0 released, 1 nothing written (no --yes) or one refused, 2 bad input or no cluster."""
    from kai_fn.commands.release import run
    from kai_fn.commands.status import Unusable

    try:
        code, out = run(args.trainjobs, args.held, args.namespace, args.all_namespaces, args.yes, args.reason,
                        args.kubeconfig, _settings(args), context=args.context)
    except Unusable as error:
        raise UsageError(_with_cluster(error, args)) from None
    _say(out)
    return code


def cmd_explain(args: argparse.Namespace) -> int:
    """Exit 0 bound or progressing, 1 blocked, 2 no such TrainJob or no cluster (one line, no traceback)."""
    from kai_fn.commands.explain import run
    from kai_fn.commands.status import Unusable

    if args.all_namespaces:
        raise UsageError("explain reads one TrainJob: -A does not apply")
    ref = args.trainjob
    if args.namespace and "/" not in ref:
        ref = f"{args.namespace}/{ref}"
    elif args.namespace and ref.partition("/")[0] != args.namespace:
        raise UsageError(f"{ref!r} is not in namespace {args.namespace} (-n)")
    try:
        code, text = run(ref, args.kubeconfig, args.output, _settings(args), context=args.context)
    except Unusable as error:
        raise UsageError(_with_cluster(error, args)) from None
    _say(text)
    return code


def cmd_invoke(args: argparse.Namespace) -> int:
    from kai_fn.commands.invoke import SampleError, load_sample, post

    try:
        sample = load_sample(args.sample)
    except SampleError as error:
        raise UsageError(str(error)) from None
    try:
        answer = post(args.url, sample)
    except ValueError:
        raise UsageError(f"--url {args.url}: not an http:// or https:// URL") from None
    except OSError as error:
        raise UsageError(f"{args.url}: no answer: {getattr(error, 'reason', error)}") from None
    _say(f"HTTP {answer.status}")
    for key in ("Retry-After", "X-Kai-Fn-Outcome"):
        if key in answer.headers:
            _say(f"{key}: {visible(answer.headers[key])}")
    if answer.body:
        _say(answer.body.rstrip())
    return EXIT_OK if answer.status < 300 else EXIT_BLOCKED


def parse_command_line(argv: Sequence[str] | None = None, extra: Sequence[AddCommand] = (),
                       prog: str = "kai-fn") -> argparse.Namespace:
    """The command line as argparse reads it (its errors exit 2), then the rules across options (UsageError)."""
    parser = build_parser(extra, prog)
    args = parser.parse_args(argv)
    if args.namespace and args.all_namespaces:
        parser.error("give -n NAMESPACE or -A, not both")
    if args.command == "release" and args.yes and not (args.reason or "").strip():
        raise UsageError("--yes needs --reason TEXT: it is recorded in the Event on each TrainJob")
    return args


def main(argv: Sequence[str] | None = None, extra: Sequence[AddCommand] = (), prog: str = "kai-fn") -> int:
    try:
        args = parse_command_line(argv, extra, prog)
    except UsageError as error:
        _say(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT
    try:
        command: Callable[[argparse.Namespace], int] = args.func
        return command(args)
    except UsageError as error:
        _say(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT
    except settings_mod.SettingsError as error:
        _say(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT


def _say(text: str, end: str = "\n", file: TextIO | None = None) -> None:
    """Print what a command says: text from the cluster is in it, so no control character reaches the terminal raw
    (:mod:`kai_fn.commands.terminal`); each field was escaped whole already, this keeps the output's own lines."""
    print(visible_lines(text), end=end, file=file or sys.stdout)


def kubectl_plugin() -> int:
    """``kubectl kai-fn ...``: kubectl runs ``kubectl-kai_fn`` from the PATH with the arguments after ``kai-fn``."""
    return main(prog="kubectl kai-fn")
