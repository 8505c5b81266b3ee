"""The API's request parsers: DRF's, refusing at the edge what would fail deeper down.

- JSON nested deeper than ``MAX_JSON_DEPTH`` is refused before it is parsed, so a hostile
  body cannot drive the parser into a ``RecursionError``;
- a body longer than ``MAX_BODY_BYTES`` is 413 even without a Content-Length;
- a NUL character or a lone surrogate anywhere (a key, a value, a form field) is a 400 that
  names the field: PostgreSQL cannot store either in text or jsonb.

Settings make them the defaults; views with their own ``parser_classes`` list these.
"""

from __future__ import annotations

import codecs
import json
import re
from itertools import accumulate
from typing import Any

from django.http import QueryDict
from django.utils.translation import gettext as _
from rest_framework import parsers
from rest_framework.exceptions import APIException, ParseError, ValidationError
from rest_framework.utils import json as drf_json

from core.limits import MAX_BODY_BYTES, MAX_JSON_DEPTH
from core.text import first_unstorable

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class RequestTooLarge(APIException):
    status_code = 413
    default_detail = "The request body is too large."
    default_code = "request_too_large"


def json_depth(text: str) -> int:
    """How deeply ``text`` nests arrays and objects (brackets inside strings do not count)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(_STEP[c] for c in brackets), default=0)


def refuse_unstorable(data: Any) -> None:
    found = first_unstorable(data)
    if found is not None:
        where, what = found
        field = where.split(".", 1)[0]
        raise ValidationError(
            {field: [_("%(where)s contains %(what)s") % {"where": where, "what": what}]}
        )


class StrictJSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = parsers.get_encoding(parser_context or {})  # type: ignore[attr-defined]  # in DRF, not in its stubs
        raw = stream.read(MAX_BODY_BYTES + 1) if stream is not None else b""
        if len(raw) > MAX_BODY_BYTES:
            raise RequestTooLarge(
                _("The request body is larger than %(n)s bytes.") % {"n": MAX_BODY_BYTES}
            )
        try:
            text = codecs.decode(raw, encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(_("JSON parse error - %(error)s") % {"error": exc}) from None
        if json_depth(text) > MAX_JSON_DEPTH:
            raise ParseError(
                _("JSON parse error - nested deeper than %(n)s levels") % {"n": MAX_JSON_DEPTH}
            )
        try:
            parse_constant = drf_json.strict_constant if self.strict else None
            data = json.loads(text, parse_constant=parse_constant)
        except (ValueError, RecursionError) as exc:
            raise ParseError(_("JSON parse error - %(error)s") % {"error": exc}) from None
        refuse_unstorable(data)
        return data


def _form_fields(data: QueryDict) -> dict[str, list[str]]:
    return {key: data.getlist(key) for key in data}


class StrictFormParser(parsers.FormParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = super().parse(stream, media_type, parser_context)
        refuse_unstorable(_form_fields(data))
        return data


class StrictMultiPartParser(parsers.MultiPartParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        parsed = super().parse(stream, media_type, parser_context)
        refuse_unstorable(_form_fields(parsed.data))
        return parsed
