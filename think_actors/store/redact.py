"""``redact_url``: a store URL fit for errors and logs, its password replaced by ``***``.

Its own module because both the URL rules (``url.py``) and the PostgreSQL store (``postgres.py``, ``_schema.py``)
show URLs, and ``url.py`` opens the PostgreSQL store: sharing this one function through ``url.py`` was a circle.
"""

from __future__ import annotations

import re

__all__ = ["redact_url"]

# scheme://user:password@ ... : the password runs to the "@" (a literal "@" in it must be percent-encoded).
_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/?#@:]*):[^/?#@]*@")


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***``, fit for errors and logs (the URL need not be valid)."""
    return _PASSWORD.sub(r"\1:***@", url)
