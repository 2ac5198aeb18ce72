"""The in-process Kubernetes API server (see ``server``), imported by its public names."""
from kai_fn.local.emulator.server import KINDS, Call, Emulator, Fault, KindInfo, Validator

__all__ = ["Call", "Emulator", "Fault", "KINDS", "KindInfo", "Validator"]
