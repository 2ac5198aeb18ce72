"""What an operator or developer runs against a cluster or a function: ``python -m kai_fn plan|explain|invoke|demo``."""
