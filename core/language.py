"""The reader's language outside a request (WebSocket and proxy scopes), chosen as the pages
choose it."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import translation
from django.utils.translation.trans_real import parse_accept_lang_header


def reader_language(scope: dict[str, Any], user: Any) -> str:
    """The reader's language, as the pages choose it: their setting, the language cookie,
    then the browser's Accept-Language."""
    candidates = [getattr(user, "language", "") or ""]
    candidates.append(scope.get("cookies", {}).get(settings.LANGUAGE_COOKIE_NAME, ""))
    accept = dict(scope.get("headers", [])).get(b"accept-language", b"").decode("latin-1")
    candidates += [code for code, _quality in parse_accept_lang_header(accept[:255])]
    for code in candidates:
        if code and code != "*":
            try:
                return translation.get_supported_language_variant(code)
            except LookupError:
                continue
    return settings.LANGUAGE_CODE
