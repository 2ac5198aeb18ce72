"""The pure core: from what was read (TrainJob, runtime) to what must exist (PodGroup, JobSet patch); no I/O.

Imports only the standard library, pydantic, jsonpatch and other core modules (tests/core/test_purity.py).
"""
