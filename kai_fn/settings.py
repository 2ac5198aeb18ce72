"""Settings from the environment, validated once at start-up; a bad value stops the process with its name."""
from __future__ import annotations

import re
from typing import Annotated, Literal, TypedDict

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from kai_fn.core import validation
from kai_fn.core.owner_metadata import DEFAULT_NODE_POOL_LABEL
from kai_fn.core.plan import NEVER_STALE, Flavor
from kai_fn.core.reserve import DEFAULT_IMAGE as DEFAULT_PLACEHOLDER_IMAGE

_GO_DURATION = re.compile(r"^-?(0|([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+)$")  # Go's time.ParseDuration
QueueCheck = Literal["enforce", "warn", "off"]
OnTimeout = Literal["event", "suspend"]


# Who sends knative/base's events when Knative's authentication-oidc is on: the identities Knative makes for its
# sources. With KAI_FN_AUDIENCE set and KAI_FN_SENDERS empty, these are the senders: an audience alone would let any
# ServiceAccount's token for it in.
SOURCES_NAMESPACE = "kai-fn"
SOURCE_SENDERS = tuple(f"system:serviceaccount:{SOURCES_NAMESPACE}:{name}" for name in (
    "kai-fn-trainjobs-oidc-sources.knative.dev-apiserversource",
    "kai-fn-jobsets-oidc-sources.knative.dev-apiserversource",
    "kai-fn-podgroups-oidc-sources.knative.dev-apiserversource",
    "kai-fn-resync-oidc-sources.knative.dev-pingsource",
))


def _namespace_slash_name(value: str, what: str) -> str:
    """``NAMESPACE/NAME`` of one object, or empty; stripped."""
    namespace, slash, name = value.strip().partition("/")
    if value.strip() and (not slash or validation.dns_label(namespace) or validation.dns_subdomain(name)):
        raise ValueError(f"must be NAMESPACE/NAME of {what}")
    return value.strip()


class Planning(TypedDict):
    """The settings :func:`kai_fn.core.plan.plan` takes, by its keyword names."""

    flavor: Flavor
    default_queue: str
    schedule_timeout_seconds: int | None
    staleness_grace_period: str | None
    placeholder_image: str


class SettingsError(SystemExit):
    """Raised at start-up; its text names the environment variable."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="ignore", case_sensitive=True, populate_by_name=True)

    default_queue: str = Field("default-queue", alias="KAI_DEFAULT_QUEUE")
    flavor: Flavor = Field("kai", alias="KAI_PODGROUP_FLAVOR")
    resume: bool = Field(True, alias="KAI_FN_RESUME")
    namespaces: Annotated[tuple[str, ...], NoDecode] = Field((), alias="KAI_FN_NAMESPACES")
    runtime_cache_seconds: float = Field(30.0, ge=0, alias="KAI_FN_RUNTIME_CACHE_SECONDS")
    # How old the list of opted-in namespaces may be (kai_fn/function/optin.py): a namespace that opts in or out is
    # seen within this long; 0: read again for each piece of work.
    namespace_cache_seconds: float = Field(10.0, ge=0, alias="KAI_FN_NAMESPACE_CACHE_SECONDS")
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0, alias="KAI_FN_MAX_BODY_BYTES")
    api_timeout_seconds: float = Field(5.0, gt=0, alias="KAI_FN_API_TIMEOUT_SECONDS")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", alias="KAI_FN_LOG_LEVEL")
    resync_limit: int = Field(50, ge=1, alias="KAI_FN_RESYNC_LIMIT")
    # The first delay before the resync offers a refused TrainJob again, doubling to 10 minutes
    # (kai_fn.function.backoff); 0: every resync offers it.
    resync_backoff_seconds: float = Field(60.0, ge=0, le=600, alias="KAI_FN_RESYNC_BACKOFF_SECONDS")
    # Threads that reconcile TrainJob events after answering them 202 (kai_fn.function.workqueue); 0: each event
    # is reconciled before its answer, which then says how the work went (503 asks for a redelivery).
    background_workers: int = Field(4, ge=0, le=64, alias="KAI_FN_BACKGROUND_WORKERS")
    audience: str = Field("", alias="KAI_FN_AUDIENCE")
    senders: Annotated[tuple[str, ...], NoDecode] = Field((), alias="KAI_FN_SENDERS")
    queue_check: QueueCheck = Field("enforce", alias="KAI_FN_QUEUE_CHECK")
    schedule_timeout_seconds: int | None = Field(None, ge=0, alias="KAI_FN_SCHEDULE_TIMEOUT_SECONDS")
    on_timeout: OnTimeout = Field("event", alias="KAI_FN_ON_TIMEOUT")
    staleness_grace_period: str | None = Field(NEVER_STALE, alias="KAI_FN_STALENESS_GRACE_PERIOD")
    # The image of the pods that hold MPI's launcher's place in its nodes' gang (kai_fn/core/reserve.py): it only
    # has to start and do nothing; a mirror of it where registry.k8s.io is not reachable.
    placeholder_image: str = Field(DEFAULT_PLACEHOLDER_IMAGE, min_length=1, alias="KAI_FN_PLACEHOLDER_IMAGE")
    # What KAI's podgrouper takes from its own flags (kai_fn/core/owner_metadata.py): --nodepool-label-key, and
    # --default-priorities-configmap-namespace/-name as NAMESPACE/NAME (KAI's default: none).
    node_pool_label_key: str = Field(DEFAULT_NODE_POOL_LABEL, alias="KAI_NODEPOOL_LABEL_KEY")
    kai_defaults_configmap: str = Field("", alias="KAI_DEFAULTS_CONFIGMAP")
    # The resync's heartbeat: a Lease NAMESPACE/NAME renewed after each successful resync; empty: none written.
    heartbeat_lease: str = Field("kai-fn/kai-fn-resync", alias="KAI_FN_HEARTBEAT_LEASE")
    # The port of GET /metrics, apart from the event port (a NetworkPolicy lets the monitoring namespace reach this
    # one alone); 0: /metrics on the event port, as the tests and the demo serve it.
    metrics_port: int = Field(0, ge=0, le=65535, alias="KAI_FN_METRICS_PORT")
    # The HTTP server's (kai_fn/function/serve.py): threads that run requests (knative/base's containerConcurrency),
    # and the seconds a connection has to deliver a whole request (a slow client costs a socket, never a thread).
    threads: int = Field(8, ge=1, le=64, alias="KAI_FN_THREADS")
    request_seconds: float = Field(30.0, gt=0, le=300, alias="KAI_FN_REQUEST_SECONDS")

    @field_validator("default_queue")
    @classmethod
    def _queue_is_a_label_value(cls, value: str) -> str:
        problem = validation.label_value(value)
        if problem or not value:
            raise ValueError(problem or "must not be empty")
        return value

    @field_validator("namespaces", "senders", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("senders")
    @classmethod
    def _service_accounts(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        """Senders are ServiceAccounts (what a TokenReview names); a list without an audience would check nothing,
        and no value accepts every ServiceAccount: empty means knative/base's sources (``SOURCE_SENDERS``)."""
        if value and not info.data.get("audience"):
            raise ValueError("needs KAI_FN_AUDIENCE: without it no sender is checked")
        if not value and info.data.get("audience"):
            return SOURCE_SENDERS
        for sender in value:
            if "*" in sender or sender in ("system:serviceaccounts", "system:authenticated"):
                raise ValueError(f"{sender!r} would accept any ServiceAccount: name each sender "
                                 "system:serviceaccount:<namespace>:<name> (empty: knative/base's sources)")
            system, kind, namespace, name = (sender.split(":") + ["", "", "", ""])[:4]
            if (system, kind) != ("system", "serviceaccount") or sender.count(":") != 3 or \
                    not namespace or not name or validation.dns_label(namespace) or validation.dns_subdomain(name):
                raise ValueError(f"{sender!r} is not system:serviceaccount:<namespace>:<name>")
        return value

    @field_validator("heartbeat_lease")
    @classmethod
    def _lease(cls, value: str) -> str:
        return _namespace_slash_name(value, "a Lease, or empty")

    @field_validator("kai_defaults_configmap")
    @classmethod
    def _configmap(cls, value: str) -> str:
        return _namespace_slash_name(value, "KAI's defaults ConfigMap, or empty (none, KAI's default)")

    @field_validator("schedule_timeout_seconds", "staleness_grace_period", mode="before")
    @classmethod
    def _unset_when_empty(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("staleness_grace_period")
    @classmethod
    def _go_duration(cls, value: str | None) -> str | None:
        """What KAI parses (``time.ParseDuration``): ``-1s`` never evicts, ``60s`` is KAI's own default."""
        if value is not None and not _GO_DURATION.fullmatch(value):
            raise ValueError("must be a Go duration such as -1s, 60s or 5m (empty: KAI's default)")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    def planning(self) -> Planning:
        """The settings the planner reads, as :func:`kai_fn.core.plan.plan` takes them."""
        return Planning(flavor=self.flavor, default_queue=self.default_queue,
                        schedule_timeout_seconds=self.schedule_timeout_seconds,
                        staleness_grace_period=self.staleness_grace_period, placeholder_image=self.placeholder_image)

    def watches(self, namespace: str) -> bool:
        """``KAI_FN_NAMESPACES``'s part alone: it narrows, and empty names no namespace in particular. Whether kai_fn
        acts in a namespace also needs its opt-in label: :meth:`kai_fn.function.optin.OptIn.watches`."""
        return not self.namespaces or namespace in self.namespaces


def load(**overrides: object) -> Settings:
    """Read the environment (``overrides`` win, by setting name); exit naming the variable on a bad value."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]  # by name, any field: pydantic checks each value
    except ValidationError as error:
        aliases = {name: field.alias for name, field in Settings.model_fields.items()}
        lines = []
        for item in error.errors(include_url=False):
            name = str(item["loc"][0]) if item["loc"] else "?"
            lines.append(f"invalid setting {aliases.get(name, name)}: {item['msg']} (got {item.get('input')!r})")
        raise SettingsError("\n".join(lines)) from None
