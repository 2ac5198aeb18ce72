"""Benchmarks of kai_fn (GitHub issue 5): ``.venv/bin/python -m bench [--out results.json]`` from the repo root.

Not part of the test suite (no ``test_*.py`` here). It drives the real function server
(``python -m kai_fn.function.serve --source main.py --target handle``, via :class:`kai_fn.local.process.FunctionProcess`)
over loopback HTTP against the kmock API emulator running in this process, and reports ratios and
counts, since the machines it runs on are small, shared and noisy. See ``BENCHMARKS.md``.
"""
