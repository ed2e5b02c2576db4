"""Record: the one way the host describes the files it writes (msgspec Structs).

msgspec decodes a file straight into typed Structs, checking types, bounds (`Meta`) and unknown
fields, and imports in a fraction of the time pydantic did, so read-only commands start fast.

A Struct built in code is not checked by msgspec itself. A Record is: building one converts and
checks its fields exactly as decoding would (a str where a datetime is declared, a dict for a nested
record, an int for a float, a str for an enum), so a bad value is refused where it is made and a file
written from a record reads back the same. Decoding through `decode`/`convert` skips that second
pass (msgspec has just done it); a record's own rules (`_check`) run either way.

Every failure is one `RecordInvalid` (a ValueError), whether from decoding or from building.
"""

from __future__ import annotations

import sys
import threading
from pathlib import PurePath
from typing import Annotated, Any, ClassVar, TypeVar, dataclass_transform

import msgspec

R = TypeVar("R", bound="Record")

# Finite floats: msgspec never decodes NaN or infinity from JSON, and these bounds refuse them when
# a record is built in code (NaN fails every comparison).
_MAX = sys.float_info.max
Finite = Annotated[float, msgspec.Meta(ge=-_MAX, le=_MAX)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(gt=0)]


def _encode_other(value: Any) -> Any:
    """A path inside a free-form field (dict[str, Any]) is written as its string, as pydantic did."""
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"a {type(value).__name__} cannot be written in a record")


_ENCODER = msgspec.json.Encoder(enc_hook=_encode_other)


class RecordInvalid(ValueError):
    """A value that is not the record it claims to be; its text is msgspec's (what and where)."""


_converting = threading.local()


class _RecordMeta(msgspec.StructMeta):
    """Every record's fields are keyword-only (msgspec does not inherit that setting), so a subclass
    may add required fields after its base's defaulted ones; the order written stays as declared."""

    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **options: Any) -> Any:
        options.setdefault("kw_only", True)
        return super().__new__(mcls, name, bases, namespace, **options)


# dataclass_transform tells a type checker what _RecordMeta does at run time: every record's __init__
# takes keyword-only fields (without it, mypy reads each subclass as a positional dataclass and refuses
# a required field after a defaulted one).
@dataclass_transform(kw_only_default=True, field_specifiers=(msgspec.field,))
class Record(msgspec.Struct, metaclass=_RecordMeta, forbid_unknown_fields=True):
    """Base of every host-side record. Subclasses declare fields; `_check` holds rules across fields."""

    # Fields an earlier version wrote and this one no longer has. A document that still carries one
    # is read through `upgrade` (which drops it, checking its value against where it lives now), so
    # an older run root reads; any other unknown field is still refused.
    retired_fields: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def upgrade(cls, raw: dict[str, Any]) -> dict[str, Any]:
        """An older document's fields as this version declares them (raise RecordInvalid if they disagree)."""
        return raw

    def __post_init__(self) -> None:
        if not getattr(_converting, "active", False):
            typed = _convert(msgspec.to_builtins(self, enc_hook=_encode_other), type(self), strict=False)
            for name in self.__struct_fields__:
                msgspec.structs.force_setattr(self, name, getattr(typed, name))
        self._check()

    def _check(self) -> None:
        """Rules across fields; raise ValueError with a sentence. Runs on decode and on build."""

    def replace(self: R, **changes: Any) -> R:
        """A copy with `changes`, converted and checked like any new record."""
        fields = {name: getattr(self, name) for name in self.__struct_fields__}
        return type(self)(**{**fields, **changes})

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (enums as their values, datetimes as ISO strings), keys as written."""
        built: dict[str, Any] = msgspec.to_builtins(self, enc_hook=_encode_other)
        return built

    def to_json(self) -> str:
        """The record as an indented JSON document (the form of the host's single-document files)."""
        return msgspec.json.format(_ENCODER.encode(self), indent=2).decode("utf-8") + "\n"

    def to_line(self) -> str:
        """The record as one compact JSON line (the form of the host's .jsonl files)."""
        return _ENCODER.encode(self).decode("utf-8") + "\n"


def _convert(value: Any, kind: type[R], *, strict: bool = True) -> R:
    _converting.active = True
    try:
        return msgspec.convert(value, kind, strict=strict)
    except msgspec.ValidationError as exc:
        raise RecordInvalid(str(exc)) from None
    finally:
        _converting.active = False


def convert(value: Any, kind: type[R]) -> R:
    """The record `kind` from already-decoded values (a dict), or RecordInvalid."""
    return _convert(value, kind, strict=False)


def _decode_retired(raw: bytes, kind: type[R]) -> R:
    """The slow path of `decode`, for an older document carrying a retired field."""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise RecordInvalid(str(exc)) from None
    if isinstance(value, dict):
        value = kind.upgrade(value)
    return _convert(value, kind)


_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {}


def decode(data: bytes | str, kind: type[R]) -> R:
    """The record `kind` from one JSON document, or RecordInvalid."""
    retired = getattr(kind, "retired_fields", ())  # a Record's; other kinds have none
    if retired:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        if any(b'"' + name.encode() + b'"' in raw for name in retired):
            return _decode_retired(raw, kind)
    decoder = _DECODERS.get(kind) or _DECODERS.setdefault(kind, msgspec.json.Decoder(kind))
    _converting.active = True
    try:
        record: R = decoder.decode(data)
        return record
    except msgspec.DecodeError as exc:  # msgspec's ValidationError is a DecodeError
        raise RecordInvalid(str(exc)) from None
    finally:
        _converting.active = False
