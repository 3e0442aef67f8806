"""``python -m bot``: read settings, set up logging, run the bot until SIGTERM/SIGINT.

Exit codes: 0 after a clean stop; 2 for a configuration error (one line on stderr).
``python -m bot export-config FILE`` / ``import-config FILE``: see :mod:`bot.configio`.
``python -m bot healthcheck``: GET the running bot's ``/healthz`` (exit 0 healthy, 1 not;
see :mod:`bot.health`), for a container's ``HEALTHCHECK``.
``python -m bot delete-webhook``: remove the token's webhook on purpose (a polling process
refuses to start while one is set; see :mod:`bot.hookctl`).
"""

from __future__ import annotations

import asyncio
import sys

from pydantic import ValidationError


def _config_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ())).upper()
    msg = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if first.get("type") == "missing" and loc == "BOT_TOKEN":
        return (
            "kopek: BOT_TOKEN is not set. Get a token from @BotFather in Telegram (/newbot) "
            "and put BOT_TOKEN=... in .env"
        )
    if loc:
        return f"kopek: configuration error in {loc}: {msg}"
    return f"kopek: configuration error: {msg}"


def main() -> int:
    """Entry point; returns the process exit code.

    ``python -m bot export-config FILE`` / ``import-config FILE`` carry the configuration
    tables between databases (:mod:`bot.configio`); ``healthcheck`` asks the running
    bot's ``/healthz`` (:mod:`bot.health`); ``delete-webhook`` removes the token's
    webhook (:mod:`bot.hookctl`); without arguments the bot runs.
    """
    if sys.argv[1:2] and sys.argv[1] in ("export-config", "import-config"):
        from bot.configio import main as config_main

        return config_main(sys.argv[1], sys.argv[2:])
    if sys.argv[1:2] == ["healthcheck"]:
        from bot.health import main as health_main

        return health_main()
    from bot.settings import Settings

    try:
        settings = Settings()  # fields come from the environment
    except ValidationError as exc:
        print(_config_error(exc), file=sys.stderr)
        return 2
    if sys.argv[1:2] == ["delete-webhook"]:
        from bot.hookctl import delete_webhook

        return asyncio.run(delete_webhook(settings))

    from bot.logs import install_excepthooks, setup_logging

    secrets = settings.secret_values()
    install_excepthooks(secrets)
    setup_logging(settings.log_level, secrets)
    import logging
    import os

    from bot.settings import misspelt_settings

    for name, meant in misspelt_settings(os.environ):  # ignored by the settings: say so
        logging.getLogger("bot.app").warning(
            "%s is not a setting and is ignored: did you mean %s?", name, meant
        )
    from bot.polling import run

    return asyncio.run(run(settings))


if __name__ == "__main__":
    sys.exit(main())
