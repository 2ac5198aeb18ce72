"""Prometheus metrics, served on ``GET /metrics`` in the text format.

One registry for the process, not prometheus_client's default one: that one adds ``process_*`` and
``python_*`` series, and every name here starts with ``kai_fn_``. The function is one process with threads
(kai_fn/function/serve.py), so one in-memory registry sees every request.

Label values come from bounded sets only (event types are mapped, never copied from the request), so an
attacker posting odd CloudEvents cannot grow the series without bound.
"""
from __future__ import annotations

import os
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

EVENTS = Counter(
    "kai_fn_events", "Deliveries answered, by event type, object kind and outcome.",
    ["type", "kind", "outcome"], registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "kai_fn_reconcile_seconds", "Time to handle one delivery that reached the cluster, by what it handled.",
    ["work"], registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
API_CALLS = Counter(
    "kai_fn_api_calls", "Kubernetes API calls, by verb, resource and HTTP status code ('error': no answer).",
    ["verb", "resource", "code"], registry=REGISTRY,
)
WAITING = Counter(
    "kai_fn_waiting_events", "TrainJob events answered 2xx without a gang made yet: Trainer has not caught up "
    "(no_jobset: a gang in segments waits for its named JobSet; jobset_replaced), or its author or the settings say "
    "wait (kai_fn_hold, resume_off); a later event does the work, or the resync.", ["reason"],
    registry=REGISTRY,
)
WORK = Counter(
    "kai_fn_work", "Parts of TrainJobs' work done in the work queue (KAI_FN_BACKGROUND_WORKERS: passes, looks at gangs, "
    "timeouts), by outcome; 'retry': the part failed and is tried again later, 'dropped': out of tries or failed "
    "unexpectedly, left to the resync.",
    ["outcome"], registry=REGISTRY,
)
WORK_QUEUE = Gauge(
    "kai_fn_work_queue", "TrainJobs whose work after the answer is queued, waiting to be tried again, or running.",
    registry=REGISTRY,
)
WORK_TIMERS = Gauge(
    "kai_fn_work_timers", "TrainJobs whose work is queued for later: a gang's schedule timeout, due then "
    "(kai_fn/function/keywork.py).",
    registry=REGISTRY,
)
BACKING_OFF = Gauge(
    "kai_fn_backing_off", "TrainJobs owed a pass that the resync leaves for later: refused or failing in a row, "
    "each after a growing delay (kai_fn/function/backoff.py).",
    registry=REGISTRY,
)
CATCH_UP = Counter(
    "kai_fn_catch_up", "The catch-up pass of a started process, once, by outcome: 'done' (the held JobSets owed are "
    "queued), 'retry' (the API was not reachable: the first ping does it), 'off' (no work queue: the resync does it).",
    ["outcome"], registry=REGISTRY,
)
RESYNC_JOINS = Counter(
    "kai_fn_resync_joins", "Pings that arrived while a resync ran and joined it instead of starting another.",
    registry=REGISTRY,
)
GANGS_CREATED = Counter("kai_fn_gangs_created", "PodGroups kai_fn created.", registry=REGISTRY)
GANG_STATUS = Counter(
    "kai_fn_gang_status_events", "Gang status reports on TrainJobs (GangUnschedulable, GangBound, PodGroupEdited); a report "
    "repeated by a duplicate delivery counts again, its Event (named by content) does not.",
    ["reason"], registry=REGISTRY,
)
GANG_BOUND_SECONDS = Histogram(
    "kai_fn_gang_bound_seconds",
    "Seconds from a TrainJob's creation to kai_fn seeing every pod of its gang on a node (GangBound), as the API "
    "server's timestamps and this process's clock tell.",
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600), registry=REGISTRY)
PRECHECK_REFUSALS = Counter(
    "kai_fn_precheck_refusals", "Gangs held back by the queue pre-check, by Event reason "
    "(QueueNotFound, GangExceedsQueue).", ["reason"], registry=REGISTRY,
)
PLACEHOLDERS = Counter(
    "kai_fn_placeholders", "Placeholder pods holding a later wave's places (MPI's launcher) in its gang: 'created', "
    "'handed_over' (deleted once JobSet made the pods), 'deleted' (the JobSet was suspended or finished).",
    ["action"], registry=REGISTRY,
)
TIMEOUTS = Counter("kai_fn_schedule_timeouts", "Gangs not fully bound within their schedule timeout.",
                   registry=REGISTRY)
OBJECT_ERRORS = Counter(
    "kai_fn_object_errors", "Objects whose work failed unexpectedly, by stage (pass, resync, sweep, timeout): each "
    "gets an Unprocessable Warning on its TrainJob, and the other objects go on.", ["stage"], registry=REGISTRY,
)
OVERSIZED = Counter(
    "kai_fn_oversized_objects", "Objects a LIST answered that kai_fn left out for their size (over 512 KiB of JSON), "
    "by resource: each gets an ObjectTooLarge Warning and is never worked on.", ["resource"], registry=REGISTRY,
)
REFUSED_ADOPTIONS = Counter(
    "kai_fn_refused_adoptions", "Objects of the name kai_fn would give a gang's PodGroup or placeholder that kai_fn "
    "did not make (or that differ from the plan): never taken as the gang.", ["kind"],
    registry=REGISTRY,
)
EVENTS_NOT_WRITTEN = Counter(
    "kai_fn_events_not_written", "Events kai_fn could not write (RBAC, the API), by Event reason; the work they "
    "report is done all the same.", ["reason"], registry=REGISTRY,
)
# A timestamp, not a count, so an alert can tell how long ago the last resync succeeded from the last value
# Prometheus scraped, also while the function is down (max_over_time): knative/components/servicemonitor/alerts.yaml.
LAST_RESYNC = Gauge(
    "kai_fn_last_resync_timestamp_seconds", "When the last resync (PingSource) succeeded, in Unix seconds; 0 before "
    "the first one of this process.", registry=REGISTRY,
)

PING = "dev.knative.sources.ping"
_APISERVER = "dev.knative.apiserver."
_TYPES = frozenset(f"{mode}.{action}" for mode in ("resource", "ref") for action in ("add", "update", "delete"))


def event_type(ce_type: str | None) -> str:
    """A short, bounded label: ``resource.update``, ``ref.add``, ``ping``, ``other`` or ``none`` (unparsed)."""
    if not ce_type:
        return "none"
    if ce_type == PING:
        return "ping"
    short = ce_type.removeprefix(_APISERVER)
    return short if ce_type.startswith(_APISERVER) and short in _TYPES else "other"


def event_kind(kind: object) -> str:
    return kind if kind in ("TrainJob", "JobSet", "PodGroup") else "other" if kind else "none"


class Meter:
    """The kube layer's observer (:class:`kai_fn.kube.Observer`): every API call, and every Event not written."""

    def called(self, verb: str, resource: str, code: str) -> None:
        API_CALLS.labels(verb, resource, code).inc()

    def event_not_written(self, reason: str) -> None:
        EVENTS_NOT_WRITTEN.labels(reason if reason.isalnum() and len(reason) <= 40 else "other").inc()


_SERVING: dict[str, int] = {}
_SERVING_LOCK = threading.Lock()


def serve(port: int, host: str = "0.0.0.0") -> None:  # noqa: S104 - scraped from the monitoring namespace
    """``/metrics`` on a port of its own (``KAI_FN_METRICS_PORT``), in a daemon thread: a scrape never takes one of
    the event port's threads, and knative/base's NetworkPolicy opens this port alone to the monitoring namespace.
    Once per process (main.py calls it at import): a second call in the same process starts nothing."""
    with _SERVING_LOCK:
        if _SERVING.get("pid") == os.getpid():
            return
        start_http_server(port, host, registry=REGISTRY)
        _SERVING["pid"] = os.getpid()


def exposition() -> tuple[bytes, str]:
    """The body and content type of a scrape (text format 0.0.4, which every Prometheus reads)."""
    return generate_latest(REGISTRY), CONTENT_TYPE_PLAIN_0_0_4
