"""A run's command line as its files record it: secrets hidden wherever they were given."""

from __future__ import annotations

from collections.abc import Sequence

from policybench.options import ENV_API_KEY, POLICY_API_KEY
from policybench.serve.client import HIDDEN, without_secrets

BLIND = "--blind"


def redacted_command(args: Sequence[str]) -> list[str]:
    """Command-line arguments as a run records them: the value of --policy-api-key, of
    --env-api-key and of --blind (its KEY would tell the letters apart), and the user:password
    and query values of any URL, hidden."""
    flags, shown, hide = (POLICY_API_KEY.flag, ENV_API_KEY.flag, BLIND), [], False
    for arg in args:
        flag, given, _ = arg.partition("=")
        if hide:
            shown.append(HIDDEN)
        elif given and flag in flags:
            shown.append(f"{flag}={HIDDEN}")
        else:
            shown.append(without_secrets(arg))
        # --blind's KEY is optional: the next word is its KEY unless it is an option
        hide = arg in flags and (arg != BLIND or not _is_option(args, len(shown)))
    return shown


def _is_option(args: Sequence[str], i: int) -> bool:
    """Whether args[i] is absent or an option (as argparse tells an optional value apart)."""
    return i >= len(args) or args[i].startswith("-")
