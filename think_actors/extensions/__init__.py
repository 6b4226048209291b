"""Extensions: tools, context blocks and hooks packaged as reusable objects, composed on an agent class.

``extensions = [ta.RedactPII(), ta.AuditLog()]`` on a ``Think`` subclass: each extension's hooks run after the
agent's own, in list order, each under its own timeout and failure policy (``chain.py`` states the rules).
``base.py`` declares the hooks; two extensions ship: ``AuditLog`` (``audit.py``) and ``RedactPII`` (``redact.py``).
"""

from .audit import AuditLog
from .base import Extension, FailurePolicy, HookDecision
from .redact import PII_KINDS, RedactPII

__all__ = ["PII_KINDS", "AuditLog", "Extension", "FailurePolicy", "HookDecision", "RedactPII"]
