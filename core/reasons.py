"""Reasons as codes with parameters, rendered in the reader's language.

A workload says why it waits, fails or stops the way Volcano's conditions do: a ``reason``
code plus the values that fill its message (``quota_exhausted{kind, tenant, resource, used,
limit, asked}``). The code and the parameters are stored; the English text is stored beside
them for the API, logs and audit; pages render the message from the code in the reader's
language, so rewording a message never loses its translation.

Each layer declares its own codes (``tenants/reasons.py``, ``scheduling/reasons.py``,
``workloads/reasons.py``) with :func:`define`; the template is a msgid marked for
extraction with this module's (Django-free) ``gettext_noop``, or :func:`ngettext_noop` for a
plural pair, and uses ``%(name)s`` placeholders::

    QUOTA = define("quota_exhausted", gettext_noop("%(kind)s %(tenant)s: ..."),
                   words={"kind": KINDS})
    QUOTA(kind="class", tenant="ML-101", ...)   # -> Reason("quota_exhausted", {...})

Parameter values are JSON-able: str, int, float, bool, lists of those, and nested
:class:`Reason` (rendered in the same language). ``words={param: {value: msgid}}`` marks a
parameter whose value is itself a word to translate (resource words, tenant kinds, weekdays);
a value with no word there is shown as it is.
The code ``text`` carries words from outside untranslated (a program's last log line, an API
server's message).

Pure Python: no project app is imported; ``django.utils.translation`` only when rendering in
the active language.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")
TEXT = "text"  # the pass-through code


class ReasonError(ValueError):
    """A reason built with missing, unknown or non-JSON parameters."""


def gettext_noop(message: str) -> str:
    """Mark a template for extraction (as Django's, without importing Django)."""
    return message


def ngettext_noop(singular: str, plural: str) -> tuple[str, str]:
    """Mark a plural pair for extraction (makemessages knows ``ngettext_noop:1,2``)."""
    return singular, plural


@dataclass(frozen=True, eq=True)
class Reason:
    """One reason: a registered code and the values of its placeholders."""

    code: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """In English (the stored text; the API and audit show it)."""
        return _render(self, translated=False)

    def render(self) -> str:
        """In the active language."""
        return _render(self, translated=True)

    def render_in(self, language: str) -> str:
        from django.utils import translation

        with translation.override(language):
            return self.render()

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "params": params_to_json(self.params)}

    @classmethod
    def from_json(cls, data: Any) -> Reason:
        """The inverse of :meth:`to_json`; a plain string is taken as ``text``."""
        if isinstance(data, Reason):
            return data
        if isinstance(data, str):
            return plain(data)
        if not isinstance(data, Mapping) or not isinstance(data.get("code"), str):
            raise ReasonError(f"not a reason: {data!r}")
        return cls(data["code"], params_from_json(data.get("params") or {}))

    def __str__(self) -> str:
        return self.text()


def params_to_json(params: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _value_to_json(value) for name, value in params.items()}


def params_from_json(params: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _value_from_json(value) for name, value in params.items()}


def _value_to_json(value: Any) -> Any:
    if isinstance(value, Reason):
        return value.to_json()
    if isinstance(value, list):
        return [_value_to_json(v) for v in value]
    return value


def _value_from_json(value: Any) -> Any:
    if isinstance(value, Mapping):  # the only objects in parameters are nested reasons
        return Reason.from_json(value)
    if isinstance(value, list):
        return [_value_from_json(v) for v in value]
    return value


@dataclass(frozen=True)
class ReasonCode:
    """A registered code: call it with its parameters to get a :class:`Reason`."""

    code: str
    template: str
    plural: str | None = None
    count: str | None = None
    words: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    separator: str = ", "  # between the items of a list parameter

    @property
    def names(self) -> frozenset[str]:
        found = set(_PLACEHOLDER.findall(self.template))
        if self.plural:
            found |= set(_PLACEHOLDER.findall(self.plural))
        if self.count:
            found.add(self.count)
        return frozenset(found)

    def __call__(self, **params: Any) -> Reason:
        names = self.names
        missing, unknown = names - params.keys(), params.keys() - names
        if missing or unknown:
            raise ReasonError(
                f"reason {self.code}: missing {sorted(missing)}, unknown {sorted(unknown)}"
            )
        checked = {name: _checked(self.code, name, value) for name, value in params.items()}
        if self.count is not None and not isinstance(checked[self.count], int):
            raise ReasonError(f"reason {self.code}: {self.count} counts, give an int")
        return Reason(self.code, checked)


def _checked(code: str, name: str, value: Any) -> Any:
    if isinstance(value, Reason) or value is None:
        return value
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Sequence):
        return [_checked(code, name, v) for v in value]
    raise ReasonError(f"reason {code}: {name}={value!r} is not JSON-able")


_REGISTRY: dict[str, ReasonCode] = {}


def define(
    code: str,
    template: str | tuple[str, str],
    plural: str | None = None,
    *,
    count: str | None = None,
    words: Mapping[str, Mapping[str, str]] | None = None,
    separator: str = ", ",
) -> ReasonCode:
    """Register ``code`` with its English ``template`` (a msgid); ``plural`` and ``count``
    (the parameter that chooses the form) for ngettext; ``template`` may be the pair
    :func:`ngettext_noop` returns."""
    if isinstance(template, tuple):
        template, plural = template
    if (plural is None) != (count is None):
        raise ReasonError(f"reason {code}: plural and count go together")
    spec = ReasonCode(code, template, plural, count, dict(words or {}), separator)
    if code in _REGISTRY and _REGISTRY[code] != spec:
        raise ReasonError(f"reason {code} is defined twice")
    unknown = set(spec.words) - spec.names
    if unknown:
        raise ReasonError(f"reason {code}: words for no placeholder {sorted(unknown)}")
    _REGISTRY[code] = spec
    return spec


def registry() -> Mapping[str, ReasonCode]:
    """Every code defined so far (import the layers' reasons modules first)."""
    return dict(_REGISTRY)


def lookup(code: str) -> ReasonCode | None:
    return _REGISTRY.get(code)


PLAIN = define(TEXT, "%(text)s")  # not a msgid: words from outside stay as they are


def plain(text: str) -> Reason:
    """Words from outside the portal, shown as they are."""
    return PLAIN(text=text)


def _render(reason: Reason, *, translated: bool) -> str:
    spec = _REGISTRY.get(reason.code)
    if spec is None:  # a code this version does not know: say what can be said
        return str(reason.params.get("text", reason.code))
    values = {
        name: _rendered(spec, name, value, translated=translated)
        for name, value in reason.params.items()
    }
    template = spec.template
    if translated and spec.code != TEXT:
        from django.utils.translation import gettext, ngettext

        if spec.plural is not None and spec.count is not None:
            template = ngettext(spec.template, spec.plural, _count(reason, spec.count))
        else:
            template = gettext(spec.template)
    elif spec.plural is not None and spec.count is not None:
        template = spec.template if _count(reason, spec.count) == 1 else spec.plural
    try:
        return template % values
    except (KeyError, ValueError, TypeError):  # a broken translation or a stale row
        try:
            return spec.template % values
        except (KeyError, ValueError, TypeError):
            return spec.template


def _count(reason: Reason, name: str) -> int:
    try:
        return int(reason.params.get(name, 0))
    except (TypeError, ValueError):
        return 0


def _rendered(spec: ReasonCode, name: str, value: Any, *, translated: bool) -> str:
    if isinstance(value, Reason):
        return _render(value, translated=translated)
    if isinstance(value, list):
        return spec.separator.join(_rendered(spec, name, v, translated=translated) for v in value)
    words = spec.words.get(name)
    if words is not None and isinstance(value, str) and value in words:
        if not translated:
            return words[value]
        from django.utils.translation import gettext

        return gettext(words[value])
    return "" if value is None else str(value)
