"""kai_fn: gang scheduling for Kubeflow Trainer TrainJobs on the KAI Scheduler, as a Knative function."""

__version__ = "0.1.0"  # pyproject.toml's [project] version (tests/deploy/test_package.py)
