# syntax=docker/dockerfile:1
#
# kai-fn image: kai_fn's server (waitress, python -m kai_fn.function.serve) serving main.handle on $PORT (8080).
#
#   docker build -t ghcr.io/<you>/kai-fn:<version> .
#   docker push ghcr.io/<you>/kai-fn:<version>     # then pin the pushed digest
#                                                  # in knative/base/kustomization.yaml
#
# Base image: pin it by digest for reproducible builds. Look the digest up with
#   docker buildx imagetools inspect python:3.11-slim   (or: crane digest python:3.11-slim)
# and build with
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim@sha256:<that digest> .
# Both stages must use the same image: the venv links to its interpreter.
ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: the kai-fn wheel, installed with its pinned dependencies ------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# Every requirement ships manylinux wheels for CPython 3.11, so no compiler is
# needed. Should one ever need building, install build tools in THIS stage only.
# The dependencies first, in their own layer (cached while only kai_fn/ changes);
# then the package as `pip install .` would: a wheel built with the backend
# pinned in pyproject.toml, without kai_fn/local (tests and demos only), with
# its extra `function` (the server: waitress, functions-framework and what they need).
RUN python -m venv /opt/venv
COPY requirements.txt requirements-cli.txt constraints.txt /src/
RUN /opt/venv/bin/pip install --no-cache-dir -r /src/requirements.txt -c /src/constraints.txt
COPY pyproject.toml README.md LICENSE /src/
COPY kai_fn/ /src/kai_fn/
RUN /opt/venv/bin/pip wheel --no-cache-dir --no-deps -w /tmp/dist /src \
    && /opt/venv/bin/pip install --no-cache-dir "$(ls /tmp/dist/kai_fn-*.whl)[function]" -c /src/constraints.txt

# ---- final: the venv (with kai_fn in it) and main.py, nothing else -----------
FROM ${PYTHON_IMAGE}

# PYTHONDONTWRITEBYTECODE: the root filesystem is read-only at run time (the
# bytecode is compiled below, at build time). HOME/TMPDIR point at /tmp, the
# only writable path (an emptyDir in the Knative Service), for any library that
# writes a temporary file; the server buffers request bodies in memory.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp

COPY --from=builder /opt/venv /opt/venv

WORKDIR /app
COPY main.py /app/main.py
RUN python -m compileall -q /app

# Numeric, non-root (nobody-style 65532); matches runAsUser in the Service.
USER 65532:65532

EXPOSE 8080

# One process: waitress on 0.0.0.0:$PORT (Knative sets PORT; default 8080),
# KAI_FN_THREADS threads (set in the Service, equal to its containerConcurrency).
# kai_fn/function/serve.py says why not functions-framework's own CLI (gunicorn).
ENTRYPOINT ["python", "-m", "kai_fn.function.serve", "--source", "main.py", "--target", "handle"]
