"""What the ``dpgate`` command's modules share: the help format, settings or a refusal."""

from __future__ import annotations

import argparse

from app.config import Settings, get_settings


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """Help that ends with each option's default, unless it is unset or the text says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False) or "default" in text:
            return text
        return super()._get_help_string(action) or text


class StartupRefused(Exception):
    """A setting or the database forbids starting; the message says which variable."""


def settings_or_refusal() -> Settings:
    from pydantic import ValidationError

    try:
        return get_settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"DPGATE_{'.'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise StartupRefused(f"invalid settings: {problems}") from None
