"""What an operator runs against a cluster, or a developer against the function: ``python -m kai_fn plan|explain|status|release|invoke``."""
