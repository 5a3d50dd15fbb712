"""Typed experiment configurations.

An experiment's configuration is a frozen dataclass deriving from :class:`Config`; each field
declares its type by annotation and its allowed values once, with :func:`param`::

    @dataclasses.dataclass(frozen=True)
    class Fig1Config(Config):
        n_base: int = param(4000, ge=20, doc="sample size of panels (b) and (c)")
        eps_grid: tuple[float, ...] = param((0.3, 0.5), gt=0, doc="the epsilons of panel (c)")

        def check(self):  # only what involves several fields
            ...

Everything else follows from the declaration: validation on construction (types; finite numbers
unless ``allow_inf``; bounds; choices; lists non-empty unless ``allow_empty``), the parsing of
``--set key=value`` (:meth:`Config.with_overrides`), the settings listed by
``dpjax run NAME --help`` (:meth:`Config.help_text`) and the ``config`` of ``config.json``
(:meth:`Config.to_dict`). Every error is a :class:`~dpjax.config.ConfigError` naming the
setting and its allowed values, e.g. ``--set n_base: must be an integer >= 20; got 0``.

Supported field types: ``int``, ``float``, ``bool``, ``str`` and ``tuple[X, ...]`` of one of
the first four (a comma-separated list on the command line; an empty value is the empty list).
A configuration is also a read-only mapping (``c["n_base"]``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
import textwrap
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from dpjax._validate import ConfigError

__all__ = ["Config", "ConfigError", "FieldInfo", "make_config", "param"]

_META = "dpjax.config"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


Bound = float | str  # a number, or the name of another (numeric, single-valued) field


@dataclasses.dataclass(frozen=True)
class _Constraint:
    ge: Bound | None = None
    gt: Bound | None = None
    le: Bound | None = None
    lt: Bound | None = None
    choices: tuple[Any, ...] | None = None
    allow_empty: bool = False
    allow_inf: bool = False
    multiple_of: int | None = None
    doc: str = ""


def param(default: Any, *, ge: Bound | None = None, gt: Bound | None = None,
          le: Bound | None = None, lt: Bound | None = None,
          choices: typing.Iterable[Any] | None = None, allow_empty: bool = False,
          allow_inf: bool = False, multiple_of: int | None = None, doc: str = "") -> Any:
    """A configuration field: its default and allowed values.

    Args:
        default: the default value (for a list field, a tuple).
        ge, gt, le, lt: bounds (``>=``, ``>``, ``<=``, ``<``); for a list, of every element.
            A bound may name another field (``le="hd_d"``): checked once every field is, and
            an error names both (``--set hd_s: must be <= hd_d (1000); got 2000``).
        choices: the allowed values (of every element, for a list).
        allow_empty: a list field may be empty (``--set NAME=`` switches its panel off).
        allow_inf: a float field (or element) may be ``inf``; otherwise numbers must be
            finite. NaN is never allowed.
        multiple_of: an integer field (or element) must be a multiple of this.
        doc: one line for ``dpjax run NAME --help``.
    """
    con = _Constraint(ge, gt, le, lt, None if choices is None else tuple(choices), allow_empty,
                      allow_inf, multiple_of, doc)
    return dataclasses.field(default=default, metadata={_META: con})


def _num(v: Bound) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


_OPS = {"ge": (">=", lambda a, b: a >= b), "gt": (">", lambda a, b: a > b),
        "le": ("<=", lambda a, b: a <= b), "lt": ("<", lambda a, b: a < b)}


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    """One field of a :class:`Config`: name, element type, list or not, constraint."""

    name: str
    kind: type  # int, float, bool or str (the element type, for a list)
    is_list: bool
    con: _Constraint

    # ---- text ------------------------------------------------------------------------------

    def _range(self) -> str:
        c = self.con
        lo = ("[", c.ge) if c.ge is not None else ("(", c.gt) if c.gt is not None else None
        hi = ("]", c.le) if c.le is not None else (")", c.lt) if c.lt is not None else None
        if lo and hi:
            out = f"in {lo[0]}{_num(lo[1])}, {_num(hi[1])}{hi[0]}"
        elif lo:
            out = f"{'>=' if lo[0] == '[' else '>'} {_num(lo[1])}"
        elif hi:
            out = f"{'<=' if hi[0] == ']' else '<'} {_num(hi[1])}"
        else:
            out = ""
        if c.multiple_of is not None:
            out = (out + " and " if out else "") + f"a multiple of {c.multiple_of}"
        if self.kind is float and c.allow_inf:
            out = (out + " " if out else "") + "(inf allowed)"
        return out

    def _element(self, plural: bool) -> str:
        if self.con.choices is not None:
            return ("values" if plural else "one") + " of " + ", ".join(
                str(v) for v in self.con.choices)
        if self.kind is bool:
            return "true/false values" if plural else "true or false"
        if self.kind is str:
            return "strings" if plural else "a string"
        if self.kind is int:
            noun = "integers" if plural else "an integer"
        else:
            finite = "" if self.con.allow_inf else "finite "
            noun = f"{finite}numbers" if plural else f"a {finite}number"
        rng = self._range()
        return f"{noun} {rng}" if rng else noun

    def describe(self) -> str:
        """What the field accepts, e.g. ``an integer >= 20`` or ``a non-empty comma-separated
        list of finite numbers > 0``."""
        if not self.is_list:
            return self._element(plural=False)
        size = "a comma-separated list (may be empty)" if self.con.allow_empty else \
            "a non-empty comma-separated list"
        return f"{size} of {self._element(plural=True)}"

    def show(self, value: Any) -> str:
        """``value`` as it would be written after ``--set NAME=``."""
        if isinstance(value, tuple):
            return ",".join(self.show(v) for v in value) if value else "(empty)"
        if isinstance(value, bool):
            return "true" if value else "false"
        return repr(value) if isinstance(value, float) else str(value)

    def error(self, got: str) -> ConfigError:
        return ConfigError(f"--set {self.name}: must be {self.describe()}; got {got}")

    # ---- values ----------------------------------------------------------------------------

    def _parse_one(self, raw: str, whole: str) -> Any:
        if self.kind is bool:
            low = raw.lower()
            if low in _TRUE or low in _FALSE:
                return low in _TRUE
            raise self.error(repr(whole))
        if self.kind is int:
            try:
                return int(raw)
            except ValueError:
                raise self.error(repr(whole)) from None
        if self.kind is float:
            try:
                return float(raw)
            except ValueError:
                raise self.error(repr(whole)) from None
        return raw

    def parse(self, raw: str) -> Any:
        """The value of ``--set NAME=raw`` (checked by :meth:`coerce` afterwards)."""
        raw = raw.strip()
        if not self.is_list:
            return self._parse_one(raw, raw)
        parts = [p.strip() for p in raw.split(",")]
        parts = [p for p in parts if p]
        if not parts and raw:
            raise self.error(repr(raw))
        return tuple(self._parse_one(p, raw) for p in parts)

    def _coerce_one(self, v: Any, got: str) -> Any:
        kind = self.kind
        if kind is bool:
            if not isinstance(v, bool):
                raise self.error(got)
        elif kind is int:
            if isinstance(v, bool) or not isinstance(v, int):
                raise self.error(got)
            v = int(v)
        elif kind is float:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise self.error(got)
            v = float(v)
            if math.isnan(v) or (math.isinf(v) and not (self.con.allow_inf and v > 0)):
                raise self.error(got)
        elif not isinstance(v, str):
            raise self.error(got)
        c = self.con
        if c.choices is not None and v not in c.choices:
            raise self.error(got)
        if kind in (int, float):
            for op, (_, holds) in _OPS.items():
                bound = getattr(c, op)
                if bound is not None and not isinstance(bound, str) and not holds(v, bound):
                    raise self.error(got)
            if c.multiple_of is not None and v % c.multiple_of:
                raise self.error(got)
        return v

    def check_relations(self, config: Config) -> None:
        """The bounds that name another field (``le="hd_d"``), on ``config``'s values."""
        for op, (sign, holds) in _OPS.items():
            other = getattr(self.con, op)
            if not isinstance(other, str):
                continue
            bound = getattr(config, other)
            value = getattr(config, self.name)
            for v in value if self.is_list else (value,):
                if not holds(v, bound):
                    raise ConfigError(f"--set {self.name}: must be {sign} {other} "
                                      f"({self.show(bound)}); got {self.show(value)}")

    def coerce(self, value: Any) -> Any:
        """``value`` checked against the declaration, in canonical form (a float field's int
        becomes a float; a list becomes a tuple); raises :class:`ConfigError`."""
        if not self.is_list:
            return self._coerce_one(value, self.show(value) if _simple(value) else repr(value))
        if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
            raise self.error(repr(value))
        got = self.show(tuple(value)) if all(_simple(v) for v in value) else repr(value)
        if not value and not self.con.allow_empty:
            raise self.error(got)
        return tuple(self._coerce_one(v, got) for v in value)


def near(name: str, names: typing.Iterable[str], n: int = 3) -> list[str]:
    """The (at most ``n``) names closest to a mistyped ``name``, best first (ties in
    alphabetical order), within 0.1 of the best similarity ratio (difflib's, at least 0.6):
    "did you mean" for experiments and settings."""
    scored = []
    for other in names:
        m = difflib.SequenceMatcher(None, name, other)
        if m.real_quick_ratio() >= 0.6 and m.quick_ratio() >= 0.6 and m.ratio() >= 0.6:
            scored.append((-m.ratio(), other))
    scored.sort()
    # the clear favourites only: glm_fig -> glm_fig1, glm_fig2, not also gem_fig1
    return [other for score, other in scored[:n] if score <= scored[0][0] + 0.1]


def _either(names: typing.Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _simple(v: Any) -> bool:
    return isinstance(v, (bool, int, float, str))


def _field_info(name: str, hint: Any, con: _Constraint) -> FieldInfo:
    is_list = typing.get_origin(hint) is tuple
    kind = hint
    if is_list:
        args = typing.get_args(hint)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"config field {name!r}: use tuple[X, ...] for a list")
        kind = args[0]
    if kind not in (int, float, bool, str):
        raise TypeError(f"config field {name!r}: unsupported type {hint!r}")
    if kind not in (int, float) and any(b is not None for b in (con.ge, con.gt, con.le, con.lt)):
        raise TypeError(f"config field {name!r}: bounds need a numeric field")
    return FieldInfo(name, kind, is_list, con)


@dataclasses.dataclass(frozen=True)
class Config(Mapping[str, Any]):
    """Base class of the experiments' configurations (see the module docstring).

    Construction validates every field and then calls :meth:`check`; a configuration object is
    therefore always valid. ``dataclasses.replace`` (or :meth:`with_overrides`) makes a
    modified, validated copy.
    """

    def __post_init__(self) -> None:
        for f in self.fields():
            object.__setattr__(self, f.name, f.coerce(getattr(self, f.name)))
        for f in self.fields():
            f.check_relations(self)
        self.check()

    def check(self) -> None:
        """Checks that involve several fields (raise :class:`ConfigError`); per-field ranges are
        declared with :func:`param` instead."""

    # ---- declaration -----------------------------------------------------------------------

    @classmethod
    def fields(cls) -> tuple[FieldInfo, ...]:
        """The fields, in declaration order."""
        return _fields_of(cls)

    @classmethod
    def field(cls, name: str) -> FieldInfo:
        for f in cls.fields():
            if f.name == name:
                return f
        raise KeyError(name)

    # ---- mapping interface -----------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        if key not in _names_of(type(self)):
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_names_of(type(self)))

    def __len__(self) -> int:
        return len(_names_of(type(self)))

    # ---- conversions -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The values by name (what ``config.json`` records)."""
        return {name: getattr(self, name) for name in _names_of(type(self))}

    def with_overrides(self, overrides: Mapping[str, Any], experiment: str = "") -> Config:
        """A validated copy with ``overrides`` applied: strings are parsed as ``--set`` values,
        other values are checked as they are (lists become tuples)."""
        names = _names_of(type(self))
        changes: dict[str, Any] = {}
        given: dict[str, str] = {}  # as the user wrote it, for the messages
        for name, value in overrides.items():
            if name not in names:
                raise self.unknown_setting(name, experiment)
            info = self.field(name)
            changes[name] = info.coerce(info.parse(value) if isinstance(value, str) else value)
            given[name] = value.strip() if isinstance(value, str) else info.show(changes[name])
        try:
            return dataclasses.replace(self, **changes)
        except ConfigError as exc:  # from check(): blame what the user changed
            raise self._blame(exc, given) from None

    @classmethod
    def unknown_setting(cls, name: str, experiment: str = "") -> ConfigError:
        """The error for ``--set name=...`` where ``name`` is no field: the close names
        ("did you mean"), else every valid one."""
        names = _names_of(cls)
        which = f" for experiment {experiment!r}" if experiment else ""
        close = [n for n in names if n.lower() == name.lower()]  # t_grid for T_grid
        close = close or near(name, names) or [
            n for n in names if len(name) >= 2 and n.startswith(name)][:3]  # eps: eps_grid
        valid = f"valid settings: {', '.join(sorted(names))}"
        if close:
            valid = f"did you mean {_either(close)}? ({valid})"
        return ConfigError(f"--set {name}: unknown setting{which}; {valid}")

    def _blame(self, exc: ConfigError, given: Mapping[str, str]) -> ConfigError:
        """A :meth:`check` error names the setting its rule is about (``--set NAME: ...``);
        when the user did not change that one, lead with the settings the user did change
        (those the rule mentions, else all), and show the unchanged one's value."""
        m = re.match(r"--set (\w+): (.*)", str(exc), re.S)
        if not given or m is None or m.group(1) in given or m.group(1) not in _names_of(
                type(self)):
            return exc
        named, rest = m.groups()
        culprits = [n for n in given if re.search(rf"\b{re.escape(n)}\b", rest)] or list(given)
        user = ", ".join(f"--set {n}={given[n]}" for n in culprits)
        value = self.field(named).show(getattr(self, named))
        return ConfigError(f"{user}: conflicts with {named}={value}, which was left unchanged; "
                           f"{named}: {rest}")

    def help_text(self, quick: Config | None = None, width: int = 88) -> str:
        """Every setting with its type and range, its default (and ``--quick`` value where
        different), and its doc line."""
        lines = []
        for f in self.fields():
            value = getattr(self, f.name)
            head = f"  {f.name}: {f.describe()}; default {f.show(value)}"
            if quick is not None and getattr(quick, f.name) != value:
                head += f" (--quick: {f.show(getattr(quick, f.name))})"
            lines.append(textwrap.fill(head, width, subsequent_indent="      ",
                                       break_on_hyphens=False))
            if f.con.doc:
                lines.append(textwrap.fill(f.con.doc, width, initial_indent="      ",
                                           subsequent_indent="      "))
        return "\n".join(lines)


def make_config(name: str, defaults: Mapping[str, Any]) -> Config:
    """An ad-hoc configuration from a mapping of typed defaults (for a quick study of one's
    own; the experiments declare their dataclasses instead): each field takes the type of its
    default (a tuple: of its first element; an empty tuple is an optional list of numbers) and
    no range beyond it (floats may be inf, never NaN). Returns the defaults as an instance."""
    specs = []
    for key, value in defaults.items():
        if isinstance(value, list):
            value = tuple(value)
        if isinstance(value, tuple):
            elem = type(value[0]) if value else float
            hint: Any = tuple[elem, ...]  # type: ignore[valid-type]
        else:
            elem = hint = type(value)
        if elem not in (int, float, bool, str):
            raise TypeError(f"{name}: setting {key!r} has an unsupported default {value!r}")
        field = param(value, allow_empty=value == (), allow_inf=elem is float)
        specs.append((key, hint, field))
    cls = dataclasses.make_dataclass(name, specs, bases=(Config,), frozen=True)
    return cls()


@functools.cache
def _fields_of(cls: type) -> tuple[FieldInfo, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        con = f.metadata.get(_META)
        if con is None:
            raise TypeError(f"{cls.__name__}.{f.name}: declare config fields with param(...)")
        out.append(_field_info(f.name, hints[f.name], con))
    numeric = {f.name for f in out if f.kind in (int, float) and not f.is_list}
    for f in out:
        for other in (f.con.ge, f.con.gt, f.con.le, f.con.lt):
            if isinstance(other, str) and other not in numeric:
                raise TypeError(f"{cls.__name__}.{f.name}: a bound names {other!r}, which is "
                                "not a single-valued numeric field")
    return tuple(out)


@functools.cache
def _names_of(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))
