"""Safety rules (seed 001), shared with the gateway: see :mod:`shared.safety`."""

from shared.safety import DISCLAIMER, EMERGENCY_ANSWER, is_emergency

__all__ = ["DISCLAIMER", "EMERGENCY_ANSWER", "is_emergency"]
