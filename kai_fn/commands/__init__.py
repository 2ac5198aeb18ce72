"""What an operator runs against a cluster, or a developer against the function: ``kai-fn`` (also ``kubectl kai-fn``
and ``python -m kai_fn``) ``status|explain|release|plan|invoke``."""
