"""``python -m bot``: read settings, set up logging, run the bot until SIGTERM/SIGINT.

Exit codes: 0 after a clean stop; 2 for a configuration error (one line on stderr).
``python -m bot export-config FILE`` / ``import-config FILE``: see :mod:`bot.ops.configio`.
``python -m bot healthcheck``: GET the running bot's ``/healthz`` (exit 0 healthy, 1 not;
see :mod:`bot.ops.health`), for a container's ``HEALTHCHECK``.
``python -m bot delete-webhook``: remove the token's webhook on purpose (a polling process
refuses to start while one is set; see :mod:`bot.app.hookctl`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from pydantic import ValidationError

from bot.cli import config_error, prog

#: The subcommands and what each does (``python -m bot --help`` prints them).
COMMANDS = {
    "run": "run the bot until SIGTERM/SIGINT (the default)",
    "export-config": "FILE: write limits, teams and subscriptions to FILE (bot.ops.configio)",
    "import-config": "FILE: read them from FILE into this DATABASE_URL",
    "healthcheck": "ask the running bot's /healthz: exit 0 healthy, 1 not",
    "delete-webhook": "remove this token's webhook (polling refuses to start while one is set)",
}


def _parse(argv: list[str]) -> tuple[str, list[str]]:
    """The subcommand and its arguments; argparse exits 2 with a usage line on a
    misspelt command (before, ``delete-webhok`` silently started the bot) and prints
    the list on ``--help``."""
    parser = argparse.ArgumentParser(
        prog=prog(),
        usage="%(prog)s [-h] [COMMAND [FILE]]",
        description="Kopek, a cost-governed LLM Telegram bot. Settings come from the "
        "environment and a .env file in the working directory (every setting is described "
        "in the README's Configuration section).",
        epilog="commands:\n" + "\n".join(f"  {k:<15} {v}" for k, v in COMMANDS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", nargs="?", default="run", choices=COMMANDS, metavar="COMMAND")
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    command, args = str(ns.command), list(ns.args)
    if args and command not in ("export-config", "import-config"):
        parser.error(f"{command} takes no arguments (got {' '.join(args)!r})")
    return command, args


def main() -> int:
    """Entry point; returns the process exit code.

    ``python -m bot export-config FILE`` / ``import-config FILE`` carry the configuration
    tables between databases (:mod:`bot.ops.configio`); ``healthcheck`` asks the running
    bot's ``/healthz`` (:mod:`bot.ops.health`); ``delete-webhook`` removes the token's
    webhook (:mod:`bot.app.hookctl`); without arguments (or ``run``) the bot runs. An unknown
    command exits 2 with argparse's usage line.
    """
    command, args = _parse(sys.argv[1:])
    if command in ("export-config", "import-config"):
        from bot.ops.configio import main as config_main

        return config_main(command, args)
    if command == "healthcheck":
        from bot.ops.health import main as health_main

        return health_main()
    from bot.settings import BotApiSettings, Settings

    if command == "delete-webhook":  # reads BOT_TOKEN and TELEGRAM_API_BASE only
        try:
            api = BotApiSettings()
        except ValidationError as exc:
            print(config_error(exc), file=sys.stderr)
            return 2
        from bot.app.hookctl import delete_webhook

        return asyncio.run(delete_webhook(api))
    try:
        settings = Settings()  # fields come from the environment
    except ValidationError as exc:
        print(config_error(exc), file=sys.stderr)
        return 2

    from bot.ops.logs import install_excepthooks, setup_logging

    secrets = settings.secret_values()
    install_excepthooks(secrets)
    setup_logging(settings.log_level, secrets)
    import logging
    import os

    from bot.settings import misspelt_settings
    from bot.settings.typos import limits_money, unknown_money_names

    for name in unknown_money_names(os.environ):  # a limit under a name no setting has
        print(
            f"kopek: configuration error: {name} is not a setting (a limit under a wrong"
            " name would leave the bot without it; the limits are in docs/configuration.md)",
            file=sys.stderr,
        )
        return 2

    for name, meant in misspelt_settings(os.environ):  # ignored by the settings: say so
        if limits_money(meant):  # without it the bot would spend with no such limit
            print(
                f"kopek: configuration error: {name} is not a setting: did you mean {meant}?"
                " (a misspelt limit would leave the bot without it)",
                file=sys.stderr,
            )
            return 2
        logging.getLogger("bot.app.factory").warning(
            "%s is not a setting and is ignored: did you mean %s?", name, meant
        )
    from bot.app import heap
    from bot.app.polling import run

    heap.enable()  # this process is the bot's own: it may freeze the start's objects
    return asyncio.run(run(settings))


if __name__ == "__main__":
    sys.exit(main())
