"""How big a request may be, checked at the edge (docs/api.md, "Limits").

``portal.middleware.RequestLimitsMiddleware`` answers a long query string with 414 and a body
over ``MAX_BODY_BYTES`` with 413; ``core.parsers`` refuse JSON nested deeper than
``MAX_JSON_DEPTH`` and text that cannot be stored (``core.text``) with 400.
"""

from __future__ import annotations

MAX_QUERY_STRING_BYTES = 8 * 1024
MAX_BODY_BYTES = 5 * 1024 * 1024 // 2  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MiB
MAX_UPLOAD_BYTES = 5 * 1024 * 1024 // 2  # a multipart body (a roster CSV) as a whole
MAX_JSON_DEPTH = 32
