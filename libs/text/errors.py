"""Errors the text frontend raises for text a caller must fix (the gateway maps them to INVALID_ARGUMENT)."""

from __future__ import annotations


class TextError(ValueError):
    """Base class: the request's text cannot be synthesised as sent."""


class EmptyTextError(TextError):
    """The text has nothing to say after normalisation (empty, whitespace, or symbols espeak-ng does not read)."""

    def __init__(self, detail: str = "") -> None:
        message = "text is empty: send at least one word or number to synthesise"
        super().__init__(f"{message} ({detail})" if detail else message)


class UnreadScriptError(EmptyTextError):
    """Every word of the text is in a script the voice's language cannot read (libs.text.scripts)."""

    def __init__(self, scripts: list[str]) -> None:
        self.scripts = scripts
        names = ", ".join(scripts)
        TextError.__init__(
            self,
            f"text has no words this voice reads: its language does not read letters of the {names} "
            f"script{'s' if len(scripts) > 1 else ''}. Send the text to a voice of its language "
            "(GET /v1/audio/voices lists them), or write it in the voice's language",
        )

    def __reduce__(self) -> tuple[type[UnreadScriptError], tuple[list[str]]]:
        return (UnreadScriptError, (self.scripts,))  # from a text process, whole


class TextTooLongError(TextError):
    """The text is longer than the per-request limit."""

    def __init__(self, length_chars: int, max_chars: int) -> None:
        self.length_chars = length_chars
        self.max_chars = max_chars
        super().__init__(
            f"text is {length_chars} characters long; the limit is {max_chars} characters per request. "
            "Split it into several requests, or stream it sentence by sentence."
        )


class InvalidTextError(TextError):
    """The text bytes are not valid UTF-8."""

    def __init__(self, byte_offset: int, reason: str) -> None:
        self.byte_offset = byte_offset
        super().__init__(f"text is not valid UTF-8 at byte offset {byte_offset} ({reason}); send UTF-8 encoded text")


class PhonemizerCrashError(TextError):
    """espeak-ng crashed on the text (the gateway survives it: espeak-ng runs in child processes)."""

    def __init__(self) -> None:
        super().__init__(
            "espeak-ng, which reads the text, crashed on part of it. This is an espeak-ng defect with a "
            "few unusual inputs, such as very long runs of letters joined by apostrophes or repeated "
            "suffixes; rewrite or remove such words (or split them with spaces) and send the text again."
        )


class PhonemizerTimeoutError(TextError):
    """espeak-ng did not finish part of the text in time and was stopped."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        super().__init__(
            f"espeak-ng, which reads the text, did not finish part of it within {timeout_s:g} s and was "
            "stopped. Remove long runs of unusual characters or symbols, or send shorter texts."
        )
