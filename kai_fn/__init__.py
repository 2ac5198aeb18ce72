"""kai_fn: gang scheduling for Kubeflow Trainer TrainJobs on the KAI Scheduler, as a Knative function."""

# The one place the version is written: the package's metadata (pyproject.toml reads it), `kai-fn --version`, the
# image tag in knative/base/kustomization.yaml and func.yaml, and CHANGELOG.md's newest release all agree with it
# (tests/deploy/test_versions.py).
__version__ = "0.2.0"
