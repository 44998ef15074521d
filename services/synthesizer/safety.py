"""Safety rules, shared with the gateway: see :mod:`shared.safety`."""

from shared.safety import DISCLAIMER, EMERGENCY_ANSWER, is_emergency

__all__ = ["DISCLAIMER", "EMERGENCY_ANSWER", "is_emergency"]
