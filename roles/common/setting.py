"""A setting's declaration, and the command-line flag a setting renders.

Every rigup setting is declared once, as a field of its role's typed class in
``roles/<role>/settings.py`` (``VllmSettings``, ...; :func:`setting`, :class:`TypedSettings`):
the field's name is the setting's, its annotation the type code reads, and :func:`setting` gives
the check its value must pass (roles/common/checks.py), whether None is allowed and, for a
service's managed flag, the :class:`Flag` it renders. Its default, meaning and source are written
once, in inventory/group_data/all.py (the file the owner reads and edits);
tests/unit/test_settings_declared.py binds the two: every declared setting is set there and
documented, every key set there is declared, every annotation fits the shipped value. From the
declarations derive the validation rules (roles/settings.py), the managed-flag refusal (a
service's extra arguments may not repeat a managed flag) and the argv (roles/vllm/flags.py
``managed_args``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from roles.common.checks import Check

#: A rule over several settings: the checked values -> ``["key: reason", ...]``
RuleOver = Callable[[Mapping[str, Any]], list[str]]


@dataclass(frozen=True)
class Flag:
    """A flag with a value: ``[name, str(value)]``; with ``omit_off`` nothing for a false value
    (``""``, ``0``, None: the feature off); ``lead`` flags go before it whenever it is rendered
    (``--enable-auto-tool-choice`` before ``--tool-call-parser``) and count as managed too."""

    name: str
    omit_off: bool = False
    lead: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        """Every flag this one manages, as a service's parser spells them."""
        return (*self.lead, self.name)

    def render(self, value: Any) -> list[str]:
        """The arguments for ``value``."""
        if self.omit_off and not value:
            return []
        return [*self.lead, self.name, str(value)]


@dataclass(frozen=True)
class JsonFlag(Flag):
    """A flag whose value is a mapping, rendered as compact JSON (``{"a":1}``, keys sorted with
    ``sort_keys``); an empty mapping or None renders nothing."""

    sort_keys: bool = False

    def render(self, value: Any) -> list[str]:
        if not value:
            return []
        text = json.dumps(dict(value), separators=(",", ":"), sort_keys=self.sort_keys)
        return [*self.lead, self.name, text]


@dataclass(frozen=True)
class Switch(Flag):
    """A boolean flag in argparse's ``BooleanOptionalAction`` form: ``--name`` for True,
    ``--no-name`` for False, both always managed."""

    def names(self) -> tuple[str, ...]:
        return (self.name, self.negative)

    @property
    def negative(self) -> str:
        """``--no-<name>``."""
        return "--no-" + self.name.removeprefix("--")

    def render(self, value: Any) -> list[str]:
        return [self.name if value else self.negative]


@dataclass(frozen=True)
class Marker(Flag):
    """A flag without a value, rendered when the setting equals ``when``."""

    when: Any = True

    def render(self, value: Any) -> list[str]:
        return [self.name] if value == self.when else []


@dataclass(frozen=True)
class Withheld(Flag):
    """A flag the setting decides by another way (the environment, say): never rendered, still
    managed, so a service's extra arguments cannot set it behind the setting's back."""

    def render(self, value: Any) -> list[str]:
        return []


@dataclass(frozen=True)
class Setting:
    """One setting: ``name`` (the key in inventory/group_data/all.py and ``host.data``),
    ``check`` (returns None or the reason a value is refused), ``optional`` (None allowed: the
    documented default behaviour) and ``flag`` (what it renders on its service's command line)."""

    name: str
    check: Check
    optional: bool = False
    flag: Flag | None = None


@dataclass(frozen=True)
class ServiceKeys:
    """The settings that give a GPU service its account, bind address, port and start timeout,
    named in full (``"vllm_port"``) so that a search for a setting finds every place that reads
    it (roles.common.service.ServiceSpec.of reads them)."""

    user: str
    host: str
    port: str
    start_timeout_s: str


#: the key of a settings class field's metadata that holds its declaration (:func:`setting`)
_DECLARED = "rigup_setting"


def setting(check: Check, *, optional: bool = False, flag: Flag | None = None) -> Any:
    """A field of a typed settings class (a frozen dataclass deriving :class:`TypedSettings`):
    the field's name is the setting's name, its annotation the type code reads, ``check`` the
    rule its value must pass, ``optional`` whether None is allowed, ``flag`` what it renders."""
    return field(metadata={_DECLARED: (check, optional, flag)})


def declared(cls: type) -> tuple[Setting, ...]:
    """The :class:`Setting` of each field of the settings class ``cls``, in field order."""
    return tuple(Setting(f.name, *f.metadata[_DECLARED]) for f in fields(cls))


class TypedSettings:
    """Base of a role's typed settings class: read once from the settings (``host.data`` or a
    mapping) into typed attributes named as the settings (``VllmSettings.of(data).vllm_port``);
    ``get`` answers as a mapping's does, so code reading either style takes it."""

    @classmethod
    def of(cls, data: Mapping[str, Any] | Any) -> Any:
        """The settings of ``cls``'s fields read from ``data`` (a missing key reads None)."""
        if isinstance(data, cls):
            return data
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})  # type: ignore[arg-type]

    def get(self, key: str, default: Any = None) -> Any:
        """The setting ``key`` as an attribute, ``default`` when this class has none."""
        return getattr(self, key, default)


def rules(settings: Iterable[Setting]) -> dict[str, Check]:
    """``{name: check}`` of ``settings``, in their order."""
    return {s.name: s.check for s in settings}


def optional(settings: Iterable[Setting]) -> tuple[str, ...]:
    """The names of ``settings`` that may be None."""
    return tuple(s.name for s in settings if s.optional)


def managed_flags(settings: Iterable[Setting]) -> dict[str, str]:
    """``{flag: setting name}`` for every flag ``settings`` render (all spellings of a
    :class:`Switch`, the ``lead`` flags), in declaration order."""
    return {n: s.name for s in settings if s.flag for n in s.flag.names()}


def render(settings: Iterable[Setting], data: Mapping[str, Any] | Any) -> list[str]:
    """The arguments ``settings`` render from ``data`` (a mapping or pyinfra ``host.data``), in
    declaration order."""
    return [a for s in settings if s.flag for a in s.flag.render(data.get(s.name))]


def each_rule(values: Mapping[str, Any], rules_: Iterable[RuleOver]) -> list[str]:
    """The problems every rule of ``rules_`` finds in ``values`` (each rule returns a list of
    ``"key: reason"``); a rule that reads a key whose own check failed (:class:`NotChecked`,
    raised by :class:`Checked`) is skipped, so one bad value hides no other rule's finding."""
    problems: list[str] = []
    for rule in rules_:
        try:
            problems.extend(rule(values))
        except NotChecked:
            continue
    return problems


class NotChecked(KeyError):
    """A rule read a setting whose own check failed (or that is missing): the rule is skipped,
    the setting's problem is already reported."""


class Checked(Mapping[str, Any]):
    """The settings that passed their own checks, for the rules over several keys: reading any
    other key raises :class:`NotChecked`, so a rule that needs a bad value is skipped while every
    other rule still runs (all problems of a run reported at once)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = dict(values)

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise NotChecked(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        """As ``self[key]``: a setting that failed its own check is never read as a default."""
        return self[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)
