"""Put first on PYTHONPATH to import kai_fn as the production image does (bench/startup.py).

``kubernetes_validate`` is a dev-only requirement (requirements-dev.txt), but when installed the ``kubernetes``
package imports it eagerly (kubernetes/dynamic/client.py, inside try/except ImportError), which costs about
0.1-0.2 s at start-up. The image installs requirements.txt only, so the benchmark hides it for the
"production deps" variant.
"""
raise ImportError("kubernetes_validate is hidden by bench/prod_deps (not in the production image)")
