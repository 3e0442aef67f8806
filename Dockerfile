# Kopek's container image: python -m bot as a non-root user.
#
#   docker build -t kopek .                      # add --build-arg EXTRAS=chart for /budget chart
#   docker run --env-file .env -v kopek-data:/app/data kopek           # polling, SQLite
#
# Polling (the default) keeps its SQLite file in the /app/data volume: one container per
# file and per bot token. Several replicas run in webhook mode on PostgreSQL: see
# compose.yaml and docs/deploy.md.
#
# Health: HEALTHCHECK runs `python -m bot healthcheck`, which GETs /healthz of the
# webhook server (webhook mode) or of the metrics server (polling with METRICS_PORT set).
# Polling without METRICS_PORT has no HTTP server: the check passes while the process
# runs (when the bot exits, the container exits with it).

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY bot ./bot
COPY budget ./budget
COPY llm ./llm
COPY scheduler ./scheduler
# the wheel carries the Alembic scripts, the locales and the token encodings (package data)
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ARG EXTRAS=""
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
COPY constraints.txt /tmp/constraints.txt
RUN wheel="$(ls /wheels/kopek-*.whl)" \
    && pip install -c /tmp/constraints.txt "${wheel}${EXTRAS:+[$EXTRAS]}" \
    && rm -rf /wheels /tmp/constraints.txt \
    && useradd --system --uid 10001 --user-group --home-dir /app --create-home kopek \
    && mkdir /app/data \
    && chown kopek:kopek /app/data
WORKDIR /app
# DATABASE_URL's default, sqlite+aiosqlite:///data/kopek.db, is relative to /app
VOLUME ["/app/data"]
USER kopek
# webhook mode (WEBHOOK_URL set) listens on every interface of the container, port 8080;
# publish it to the host's loopback for the TLS reverse proxy (compose.yaml)
ENV WEBHOOK_LISTEN_HOST=0.0.0.0
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=10s --start-period=90s --retries=3 \
    CMD ["python", "-m", "bot", "healthcheck"]
# SIGTERM (docker stop) drains in-flight answers for SHUTDOWN_GRACE_SECONDS (20 s):
# give the container more (docker stop -t 40; compose.yaml: stop_grace_period)
STOPSIGNAL SIGTERM
ENTRYPOINT ["python", "-m", "bot"]
