"""How a setting is declared and read.

A setting is a field of a frozen dataclass, declared once with `setting(...)`: its default, the
environment variable and command-line flag that set it, its unit and what it does. A service's
settings are a dataclass whose fields are such groups (`load` reads them). Flag beats environment
beats default, so one image runs from a shell (`--port 50051`) and from a manifest (`TTS_PORT`).
Values are checked when they are read: a bad one stops the process with a message that names the
flag, the variable and what is allowed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

_METADATA_KEY = "setting"
_Settings = TypeVar("_Settings")


@dataclass(frozen=True)
class Setting:
    """What a settings field says about itself."""

    env: str
    """Environment variable that sets it when the flag is absent."""
    doc: str
    """What it does, in one line."""
    unit: str = ""
    """Its unit ("s", "ms", "MiB", "count", ...), or "" for names and URLs."""
    flag: str = ""
    """Its command-line flag ("" until `settings_of` fills it in from the field name)."""
    choices: tuple[str, ...] = ()
    """The values allowed, when they are a fixed list."""
    minimum: float | None = None
    """Smallest allowed value (inclusive)."""
    maximum: float | None = None
    """Largest allowed value (inclusive)."""
    parse: Callable[[str], Any] | None = None
    """Turns the text of a flag or variable into a value; None: the type of the default."""
    repeatable: bool = False
    """Whether the flag may be given several times (the variable: comma-separated); the value is a tuple."""
    by_service: Mapping[str, Any] | None = None
    """Defaults that differ from service to service (e.g. ports), by service name."""
    show: Callable[[Any], str] = str
    """Writes one value as a flag would take it (for --help and docs/settings.md)."""


def setting(
    default: Any,
    *,
    env: str,
    doc: str,
    unit: str = "",
    flag: str = "",
    choices: Sequence[str] = (),
    minimum: float | None = None,
    maximum: float | None = None,
    parse: Callable[[str], Any] | None = None,
    repeatable: bool = False,
    by_service: Mapping[str, Any] | None = None,
    show: Callable[[Any], str] = str,
) -> Any:
    """A dataclass field that is a setting (see `Setting` for the arguments)."""
    spec = Setting(env, doc, unit, flag, tuple(choices), minimum, maximum, parse, repeatable, by_service, show)
    metadata = {_METADATA_KEY: spec}
    if isinstance(default, (list, dict, set)):
        raise TypeError("a setting's default must be immutable (use a tuple)")
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class DeclaredSetting:
    """One setting of a service, as `settings_of` lists it."""

    group: str
    """The field of the service's settings that holds its group."""
    name: str
    """Its field name within the group."""
    spec: Setting
    """What it says about itself (flag filled in)."""
    default: Any
    """Its default for the service."""


def settings_of(service_settings: type, service: str) -> list[DeclaredSetting]:
    """Every setting of `service`, whose settings dataclass is `service_settings`, in declaration order."""
    declared = []
    for group_field in dataclasses.fields(service_settings):
        group = _group_type(service_settings, group_field.name)
        for field in dataclasses.fields(group):
            spec = field.metadata.get(_METADATA_KEY)
            if spec is None:
                continue
            spec = dataclasses.replace(spec, flag=spec.flag or "--" + field.name.replace("_", "-"))
            default = spec.by_service[service] if spec.by_service is not None else field.default
            declared.append(DeclaredSetting(group_field.name, field.name, spec, default))
    return declared


def load(service_settings: type[_Settings], service: str, argv: Sequence[str] | None = None,
         environ: Mapping[str, str] | None = None) -> _Settings:  # fmt: skip
    """`service`'s settings from `argv` (sys.argv[1:] if None), `environ` (os.environ if None) and the
    defaults; SystemExit with a clear message for anything invalid."""
    env = os.environ if environ is None else environ
    declared = settings_of(service_settings, service)
    parser = argparse.ArgumentParser(
        prog=f"python -m services.{service}",
        description=f"The {service} service of the TTS mesh. Every flag falls back to its environment variable.",
    )
    for item in declared:
        spec = item.spec
        unit = f"; {spec.unit}" if spec.unit else ""
        help_text = f"{spec.doc} ({spec.env}{unit}; default {render_value(item.default, spec.show)})"
        action = "append" if spec.repeatable else "store"
        # argparse formats help with %: a literal one must be doubled.
        parser.add_argument(spec.flag, dest=f"{item.group}.{item.name}", action=action, default=None, help=help_text.replace("%", "%%"))
    given = vars(parser.parse_args(argv))
    groups: dict[str, dict[str, Any]] = {field.name: {} for field in dataclasses.fields(service_settings)}
    for item in declared:
        groups[item.group][item.name] = _value(item, given[f"{item.group}.{item.name}"], env)
    try:
        built = {name: _group_type(service_settings, name)(**values) for name, values in groups.items()}
        return service_settings(**built)
    except (ValueError, TypeError) as error:
        raise SystemExit(f"invalid settings for the {service} service: {error}") from None


def render_value(value: Any, show: Callable[[Any], str] = str) -> str:
    """A value as docs/settings.md and --help show it."""
    if isinstance(value, tuple):
        return ",".join(show(item) for item in value) or '""'
    if value == "":
        return '""'
    return show(value)


def _value(item: DeclaredSetting, flag_value: Any, env: Mapping[str, str]) -> Any:
    spec = item.spec
    source, raw = (spec.flag, flag_value) if flag_value is not None else (spec.env, env.get(spec.env))
    if raw is None or (source == spec.env and raw.strip() == ""):  # an empty variable is an absent one
        return item.default
    parse = spec.parse or _parser_for(item.default)
    try:
        if spec.repeatable:
            texts = raw if isinstance(raw, list) else raw.split(",")
            value: Any = tuple(parse(text.strip()) for text in texts if text.strip())
        else:
            value = parse(raw.strip() if isinstance(raw, str) else raw)
    except ValueError as error:
        raise SystemExit(f"{source}={raw!r} is not valid for {spec.flag} ({spec.env}): {error}") from None
    for problem in _problems(spec, value):
        raise SystemExit(f"{source}={raw!r}: {spec.flag} ({spec.env}) {problem}")
    return value


def _problems(spec: Setting, value: Any) -> Iterator[str]:
    values = value if isinstance(value, tuple) else (value,)
    for one in values:
        if spec.choices and one not in spec.choices:
            yield f"must be one of {', '.join(spec.choices)}"
        if spec.minimum is not None and one < spec.minimum:
            yield f"must be at least {spec.minimum:g}"
        if spec.maximum is not None and one > spec.maximum:
            yield f"must be at most {spec.maximum:g}"


def _parser_for(default: Any) -> Callable[[str], Any]:
    if isinstance(default, bool):
        return _parse_bool
    if isinstance(default, (int, float, str)):
        return type(default)
    raise TypeError(f"a setting with default {default!r} needs an explicit `parse`")


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _group_type(service_settings: type, name: str) -> type:
    import typing

    hints = typing.get_type_hints(service_settings)
    group = hints[name]
    if not dataclasses.is_dataclass(group):
        raise TypeError(f"{service_settings.__name__}.{name} is not a settings group")
    return group  # type: ignore[return-value]
