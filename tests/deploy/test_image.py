"""The Dockerfile builds a slim, non-root, read-only-root image of main.py and the kai-fn package (the wheel of
pyproject.toml, as ``pip install .`` builds it) with the pinned requirements."""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from functools import cache

from kai_fn.local.process import serve_command
from tests.manifests import BASE, REPO, container, ksvc, render


@dataclass
class Instruction:
    cmd: str
    args: str
    line: int


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, cmd: str) -> list[Instruction]:
        return [i for i in self.instructions if i.cmd == cmd]


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with their arguments; comments dropped, ``\\`` continuations joined.

    As in Docker, a comment line inside a continuation is dropped and does not
    end it; the escape character is the default backslash.
    """
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = n
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        joined = " ".join(p for p in pending if p)
        pending = []
        cmd, _, args = joined.partition(" ")
        out.append(Instruction(cmd.upper(), args.strip(), start))
    assert not pending, "Dockerfile ends inside a line continuation"
    return out


def _substitute(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""), text)


def stages(instructions: list[Instruction]) -> list[Stage]:
    global_args: dict[str, str] = {}
    out: list[Stage] = []
    for ins in instructions:
        if ins.cmd == "FROM":
            words = [w for w in ins.args.split() if not w.startswith("--platform")]
            image = _substitute(words[0], global_args)
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            out.append(Stage(image, name))
        elif not out:
            assert ins.cmd == "ARG", f"line {ins.line}: only ARG may precede the first FROM"
            key, _, value = ins.args.partition("=")
            global_args[key.strip()] = value.strip().strip('"')
        else:
            out[-1].instructions.append(ins)
    return out


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), "use the exec (JSON) form"
    return value


def env_pairs(args: str) -> dict[str, str]:
    words = shlex.split(args)
    if words and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}  # legacy `ENV key value`
    return dict(w.split("=", 1) for w in words)


DOCKERFILE_SAMPLE = """\
# syntax=docker/dockerfile:1
ARG IMG=python:3.11-slim
FROM ${IMG} AS b
RUN a \\
    # a comment inside a continuation
    && b

FROM $IMG
ENV A=1 \\
    B="two words"
CMD ["x", "--y"]
"""


def test_dockerfile_parser_joins_continuations_and_resolves_from_args():
    ins = parse_dockerfile(DOCKERFILE_SAMPLE)
    assert [(i.cmd, i.line) for i in ins] == [("ARG", 2), ("FROM", 3), ("RUN", 4), ("FROM", 8), ("ENV", 9), ("CMD", 11)]
    assert ins[2].args == "a && b"
    first, final = stages(ins)
    assert (first.image, first.name, final.image, final.name) == ("python:3.11-slim", "b", "python:3.11-slim", None)
    assert env_pairs(final.all("ENV")[0].args) == {"A": "1", "B": "two words"}
    assert exec_form(final.all("CMD")[0].args) == ["x", "--y"]


@cache
def dockerfile() -> list[Stage]:
    return stages(parse_dockerfile((REPO / "Dockerfile").read_text()))


def final_stage() -> Stage:
    return dockerfile()[-1]


def final_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in final_stage().all("ENV"):
        env.update(env_pairs(ins.args))
    return env


def test_dockerfile_is_multi_stage_with_a_slim_python_final_stage():
    all_stages = dockerfile()
    assert len(all_stages) >= 2
    assert re.fullmatch(r"python:3\.11-slim(@sha256:[0-9a-f]{64})?", final_stage().image), final_stage().image
    assert all_stages[0].image == final_stage().image, "the venv must be built on the final stage's interpreter"


def test_dockerfile_final_stage_runs_as_numeric_non_root_matching_the_service():
    users = final_stage().all("USER")
    assert users, "no USER in the final stage"
    uid, _, gid = users[-1].args.partition(":")
    assert uid.isdigit() and int(uid) != 0
    assert not gid or gid.isdigit()
    sc = container(ksvc(render(BASE)))["securityContext"]
    assert sc["runAsUser"] == int(uid)
    if gid:
        assert sc.get("runAsGroup", int(gid)) == int(gid)


def test_dockerfile_exposes_the_service_port():
    exposed = {p for ins in final_stage().all("EXPOSE") for p in ins.args.split()}
    port = container(ksvc(render(BASE)))["ports"][0]["containerPort"]
    assert exposed == {str(port)} == {"8080"}


def test_dockerfile_runs_kai_fns_server_on_main_handle():
    """The server that reads each request whole before a thread takes it (kai_fn/function/serve.py), as
    FunctionProcess runs it for the tests."""
    st = final_stage()
    argv: list[str] = []
    for cmd in ("ENTRYPOINT", "CMD"):
        found = st.all(cmd)
        if found:
            argv += exec_form(found[-1].args)
    assert argv[:3] == ["python", "-m", "kai_fn.function.serve"] and serve_command(8080)[1:3] == argv[1:3]
    pairs = dict(zip(argv[3::2], argv[4::2]))
    assert pairs["--target"] == "handle"
    assert pairs["--source"] == "main.py"
    assert "--port" not in argv, "the port must come from $PORT, which Knative sets"
    # --source is relative: it must resolve against WORKDIR, where main.py is copied.
    workdir = st.all("WORKDIR")[-1].args
    assert any(shlex.split(c.args)[-1] in (f"{workdir}/main.py", "./", "main.py") for c in st.all("COPY"))


def test_dockerfile_installs_the_pinned_requirements_in_the_builder():
    builder = dockerfile()[0]
    runs = " ".join(i.args for i in builder.all("RUN"))
    assert re.search(r"pip install\b[^&;]*-r\s+\S*requirements\.txt", runs), runs
    copied = {w for c in builder.all("COPY") for w in shlex.split(c.args)[:-1]}
    assert {"requirements.txt", "requirements-cli.txt"} <= copied, "requirements.txt and the file it includes"
    reqs = [
        line.split("#")[0].strip()
        for name in ("requirements.txt", "requirements-cli.txt")
        for line in (REPO / name).read_text().splitlines()
        if line.split("#")[0].strip() and not line.startswith("-r ")
    ]
    assert reqs and all(re.fullmatch(r"[A-Za-z0-9_.\[\]-]+==[\w.]+", r) for r in reqs), reqs


def test_dockerfile_builds_the_package_wheel_and_installs_it_with_the_constraints():
    """The image runs what ``pip install .[function]`` installs: the wheel of pyproject.toml (without kai_fn/local)
    with the server's extra."""
    builder = dockerfile()[0]
    copied = {w for c in builder.all("COPY") for w in shlex.split(c.args)[:-1]}
    assert {"pyproject.toml", "kai_fn/"} <= copied, copied
    runs = " && ".join(i.args for i in builder.all("RUN"))
    wheel = re.search(r"pip wheel\b(?=[^&;]*--no-deps)[^&;]*-w\s+(\S+)\s+(\S+)", runs)
    assert wheel, runs
    dist, source = wheel.groups()
    assert any(shlex.split(c.args)[-1].rstrip("/") == source.rstrip("/") for c in builder.all("COPY")
               if "pyproject.toml" in c.args), "the wheel is built from where pyproject.toml was copied"
    install = rf"/opt/venv/bin/pip install\b[^&;]*{re.escape(dist)}/kai_fn-\*\.whl\)\[function\]\"[^&;]*-c\s+\S*constraints\.txt"
    assert re.search(install, runs), runs


BUILD_TOOLS = ("gcc", "g++", "build-essential", "make", "clang", "python3-dev", "libc6-dev")


def test_dockerfile_final_stage_installs_no_build_tools():
    runs = final_stage().all("RUN")
    assert [ins.args for ins in runs] == ["python -m compileall -q /app"]
    for ins in runs:
        words = set(re.split(r"[\s;&|]+", ins.args))
        assert not words & set(BUILD_TOOLS), f"line {ins.line}: {ins.args}"
        assert not re.search(r"\b(apt-get|apt|apk|yum|dnf)\b.*\binstall\b", ins.args), f"line {ins.line}"


def test_dockerfile_adds_no_urls():
    fetching = [ins for st in dockerfile() for ins in st.all("ADD") + st.all("RUN")
                if re.search(r"\b(https?|git|ftp)://|git@", ins.args)]
    assert sum(len(st.instructions) for st in dockerfile()) > 10, "the Dockerfile parsed to almost nothing"
    assert fetching == [], [f"line {ins.line}: {ins.args}" for ins in fetching]


def test_dockerfile_final_stage_copies_only_the_venv_and_the_app():
    copies = []
    for ins in final_stage().all("COPY"):
        words = shlex.split(ins.args)
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        copies.append((tuple(flags), tuple(p.rstrip("/") for p in paths[:-1])))
    assert sorted(copies) == sorted([(("--from=builder",), ("/opt/venv",)), ((), ("main.py",))]), copies


def test_dockerfile_works_with_a_read_only_root_filesystem():
    env = final_env()
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    mounts = {m["mountPath"] for m in container(ksvc(render(BASE))).get("volumeMounts", [])}
    for var in ("HOME", "TMPDIR"):
        assert any(env[var] == m or env[var].startswith(m + "/") for m in mounts), (var, env[var], mounts)


def test_dockerignore_admits_only_what_the_dockerfile_copies():
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert lines[0] == "*", "exclude everything by default"
    included = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    from_context = set()
    for st in dockerfile():
        for ins in st.all("COPY"):
            words = shlex.split(ins.args)
            if any(w.startswith("--from") for w in words):
                continue
            sources = [w for w in words if not w.startswith("--")][:-1]
            from_context |= {w.rstrip("/") for w in sources}
    assert included == from_context
    assert "kai_fn/local" in lines, "the wheel leaves kai_fn/local out; so does the build context"
