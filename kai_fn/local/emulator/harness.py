"""The public harness: an emulator on a loopback port in a background thread, plus direct access to its state."""
from __future__ import annotations

import asyncio
import builtins
import copy
import json
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp.web
import kubernetes.client

from kai_fn.core.keys import OPT_IN_LABEL
from kai_fn.local.emulator.faults import Call, Fault
from kai_fn.local.emulator.kinds import KINDS, WRITE_VERBS, KindInfo, Validator
from kai_fn.local.emulator.server import Server, now
from kai_fn.local.emulator.tokens import API_AUDIENCES


class Emulator:
    """Start with ``with Emulator() as api:``; talk to ``api.url`` or ``api.kubeconfig`` over real HTTP.

    ``validate(obj) -> problems`` sees every object a create, patch or update is about to store;
    ``require_namespaces`` makes creates in a namespace that was never created answer 404, as a cluster does.
    """

    def __init__(self, validate: Validator | None = None, *, require_namespaces: bool = False,
                 name_gangs: bool = False) -> None:
        """``name_gangs``: JobSets are named at admission as knative/components/admission-policy names them."""
        self._server = Server(validate=validate, require_namespaces=require_namespaces, name_gangs=name_gangs)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._port: int | None = None
        self._tmp: Path | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("the emulator is already started")
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="kai-fn-emulator", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the emulator did not start within 10 s")
        if self._error is not None:
            raise RuntimeError("the emulator failed to start") from self._error
        self._tmp = Path(tempfile.mkdtemp(prefix="kai-fn-emulator-"))
        (self._tmp / "kubeconfig").write_text(json.dumps({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "emulator", "user": {}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "emulator"}}],
            "current-context": "emulator",
        }))
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._server.stopping is not None:
            self._loop.call_soon_threadsafe(self._server.stopping.set)
        self._thread.join(10)
        self._thread = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server.stopping = asyncio.Event()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        async with self._server:
            # kmock.Server is not used: it swaps aiohttp's resolver class-wide (two emulators in one
            # process must then stop in LIFO order) and cancels handlers when the client goes away,
            # which would turn a slow-but-applied write into one that never happened.
            web = aiohttp.web.Server(self._server, handler_cancellation=False, access_log=None)
            runner = aiohttp.web.ServerRunner(web, shutdown_timeout=1.0)
            await runner.setup()
            await aiohttp.web.SockSite(runner, sock).start()
            self._ready.set()
            try:
                await self._server.stopping.wait()
            finally:
                await runner.cleanup()

    # -- connection --------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("the emulator is not started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def kubeconfig(self) -> str:
        if self._tmp is None:
            raise RuntimeError("the emulator is not started")
        return str(self._tmp / "kubeconfig")

    def client(self) -> kubernetes.client.ApiClient:
        config = kubernetes.client.Configuration()
        config.host = self.url
        return kubernetes.client.ApiClient(config)

    @property
    def kmock(self) -> Server:
        """The underlying kmock handler, for its DSL on non-resource paths and its raw request log."""
        return self._server

    # -- faults and the call log -------------------------------------------------------------------

    @property
    def faults(self) -> Callable[[Call], Fault | None] | None:
        return self._server.faults

    @faults.setter
    def faults(self, value: Callable[[Call], Fault | None] | None) -> None:
        self._server.faults = value

    @property
    def calls(self) -> list[Call]:
        return self._server.calls()

    def writes(self) -> list[Call]:
        return [c for c in self._server.calls() if c.verb in WRITE_VERBS]

    def reset_calls(self) -> None:
        self._server.reset_calls()

    # -- ServiceAccount tokens ---------------------------------------------------------------------

    def issue_token(self, namespace: str, name: str, audiences: list[str] | None = None, seconds: int = 3600) -> str:
        """What a TokenRequest for ServiceAccount ``namespace/name`` returns; TokenReviews here then accept it."""
        return self._server.tokens.issue(namespace, name, audiences or list(API_AUDIENCES), seconds)

    # -- direct state access (no Call recorded, no admission) --------------------------------------

    @staticmethod
    def _info(api_version: str, kind: str) -> KindInfo:
        try:
            return KINDS[api_version, kind]
        except KeyError:
            raise KeyError(f"the emulator does not serve {api_version} {kind}") from None

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Seed or replace an object as if it had always been there, filling server-owned metadata."""
        info = self._info(obj.get("apiVersion", ""), obj.get("kind", ""))
        stored = copy.deepcopy(obj)
        meta = stored.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("put() needs metadata.name")
        if info.namespaced and not meta.get("namespace"):
            raise ValueError(f"put() needs metadata.namespace for the namespaced {info.kind}")
        if not info.namespaced:
            meta.pop("namespace", None)
        with self._server.state_lock:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now())
            if info.custom:
                meta.setdefault("generation", 1)
            if meta.get("resourceVersion"):
                self._server.note_revision(meta["resourceVersion"])
            else:
                meta["resourceVersion"] = self._server.next_revision()
            self._server.store(info, stored)
            return copy.deepcopy(stored)

    def opt_in(self, *namespaces: str, enabled: bool = True) -> None:
        """Seed each Namespace labelled ``kai-fn.io/enabled=true`` (kai_fn acts there, and only there), or, not
        ``enabled``, without the label: as a cluster's administrator leaves them."""
        for name in namespaces:
            labels = {OPT_IN_LABEL: "true"} if enabled else {}
            self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels},
                      "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        info = self._info(api_version, kind)
        with self._server.state_lock:
            obj = self._server.current(info, namespace, name)
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, api_version: str, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        info = self._info(api_version, kind)
        with self._server.state_lock:
            return [copy.deepcopy(obj) for found, obj in self._server.live()
                    if found is info and (namespace is None or obj["metadata"].get("namespace") == namespace)]

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        info = self._info(api_version, kind)
        with self._server.state_lock:
            self._server.remove(info, namespace, name)

    def history(self, api_version: str, kind: str, namespace: str | None, name: str) -> builtins.list[dict[str, Any] | None]:
        """Every stored version of an object, oldest first; None marks a deletion."""
        info = self._info(api_version, kind)
        key = Server.key(info, namespace, name)
        with self._server.state_lock:
            if key not in self._server.objects:
                return []
            return [None if v is None else copy.deepcopy(v.raw) for v in self._server.objects[key].history]

    def collect_garbage(self) -> builtins.list[tuple[str, str, str | None, str]]:  # list: the method above
        """Do once what the cluster's garbage collector does: delete objects whose owners are all gone.

        An owner counts as present only if an object of its kind and name exists with the referenced uid,
        in the dependent's namespace (or cluster-wide for cluster-scoped owners). Returns what was deleted.
        """
        deleted: list[tuple[str, str, str | None, str]] = []
        with self._server.state_lock:
            while True:
                present = {(i.api_version, i.kind, o["metadata"].get("namespace"), o["metadata"]["name"],
                            o["metadata"].get("uid")) for i, o in self._server.live()}
                doomed = []
                for info, obj in self._server.live():
                    refs = obj["metadata"].get("ownerReferences") or []
                    namespace = obj["metadata"].get("namespace")

                    def exists(ref: dict[str, Any]) -> bool:
                        owner = KINDS.get((ref.get("apiVersion", ""), ref.get("kind", "")))
                        if owner is None or (owner.namespaced and namespace is None):
                            return True  # unresolvable references keep the dependent, as in the real collector
                        scope = namespace if owner.namespaced else None
                        return (owner.api_version, owner.kind, scope, ref.get("name"), ref.get("uid")) in present

                    if refs and not any(exists(ref) for ref in refs):
                        doomed.append((info, namespace, obj["metadata"]["name"]))
                if not doomed:
                    return deleted
                for info, namespace, name in doomed:
                    self._server.remove(info, namespace, name)
                    deleted.append((info.api_version, info.kind, namespace, name))
