# Two commands do all set-up on a fresh machine: `make run` and `make test`.
# Only Python 3.11+, pip and the package registries are assumed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kopek-installed
SRC := bot llm budget scheduler

PG_PORT ?= 5433

.PHONY: install run run-postgres test lint typecheck bench clean locales chromium

# uv (from PyPI, pinned in constraints.txt, installed into the venv by pip) resolves and
# installs the same pinned versions as pip from the same constraints, in parallel: measured
# on a fresh 2-core machine, cold caches, `pip install --upgrade pip` + `pip install`
# 36 s wall (17 s CPU), `pip install uv` + `uv pip install` 9 s (6 s CPU), the same 99
# packages at the same versions. If uv cannot be had or fails, pip does the install.
# Bytecode: pip would compile every installed module on one core; compileall -j 0 does
# the same work on every core, leaving out what the bot and the suite do not import (mypy
# and mypyc run as compiled extensions; pip, setuptools, pygments; packages' own tests):
# about 18 -> 12 s CPU (measured 18.4 -> 11.3 s with fontTools also left out, but
# matplotlib's savefig imports fontTools, so /budget chart tests need it). Whatever is left out and imported after all
# is compiled on first use (`make test` lets Python write bytecode). Like pip, a file
# that does not compile is left to fail when imported.
SKIP_COMPILE := '/site-packages/(mypy|mypyc|pip|setuptools|pygments|pkg_resources)/|/tests?/'
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	{ $(PY) -m pip install --quiet -c constraints.txt uv \
	  && $(VENV)/bin/uv pip install --quiet --python $(PY) --upgrade-package pip -c constraints.txt \
	     pip -e '.[test,chart]'; } \
	|| { $(PY) -m pip install --quiet --upgrade pip \
	  && $(PY) -m pip install --quiet --no-compile -c constraints.txt -e '.[test,chart]'; }
	$(PY) -m compileall -qq -j 0 -x $(SKIP_COMPILE) $$($(PY) -c 'import sysconfig as s; print(*{s.get_path("purelib"), s.get_path("platlib")})') || true
	touch $(STAMP)

# Only the venv (make run / make test do this themselves).
install: $(STAMP)

# The bot applies the Alembic migrations itself on start (idempotent).
# The .env check comes before the venv is built: a newcomer without one learns it at once,
# not after the install.
NO_ENV := echo "No .env found: cp .env.example .env, then set BOT_TOKEN (from @BotFather in Telegram: /newbot) and a provider key."; exit 2
run:
	@test -f .env || { $(NO_ENV); }
	@$(MAKE) --no-print-directory $(STAMP)
	$(PY) -m bot

# The bot on a local PostgreSQL: the test suite's embedded server (tests/support/pg.py, data kept in
# .pgdata, port PG_PORT), DATABASE_URL pointed at it; Ctrl-C or SIGTERM stops the bot, then
# the server (tests/support/pg.py forwards the signal; both die with the runner if it is killed).
run-postgres:
	@test -f .env || { $(NO_ENV); }
	@$(MAKE) --no-print-directory $(STAMP)
	$(PY) -m tests.support.pg run --data .pgdata --port $(PG_PORT) -- $(PY) -m bot

lint: $(STAMP)
	$(PY) -m ruff check $(SRC) tests bench
	$(PY) -m ruff format --check $(SRC) tests bench

typecheck: $(STAMP)
	$(PY) -m mypy

# Four workers on two cores: most end-to-end time is waiting (provider delays, flood
# waits, process starts), so two more workers overlap the waits; worksteal keeps the
# workers finishing together (measured: -n 2 4m16s, -n 4 --dist worksteal 2m53s).
# Lint first (a second); mypy (~25 s on a clean clone, no cache) runs beside pytest in
# those waits, its report printed after pytest's. Either failing fails the target.
# PYTHONDONTWRITEBYTECODE is emptied for the suite (some machines set it): each of the
# four workers would compile the tests and the code again, and each process a test
# starts the code it imports (measured: collection 13.1 -> 9.2 s CPU, a bot start ~1 s).
test: $(STAMP) lint chromium
	@echo "$(PY) -m mypy &  $(PY) -m pytest -q -n 4 --dist worksteal"
	@export PYTHONDONTWRITEBYTECODE=; \
	$(PY) -m mypy > $(VENV)/mypy-report.txt 2>&1 & mypy=$$!; \
	trap 'kill $$mypy 2>/dev/null' INT TERM; \
	$(PY) -m pytest -q -n 4 --dist worksteal; tests=$$?; \
	wait $$mypy; types=$$?; \
	echo "$(PY) -m mypy"; cat $(VENV)/mypy-report.txt; \
	test $$tests -eq 0 && test $$types -eq 0

# Debian's chromium for the operator dashboard's browser test
# (tests/e2e/test_dashboard_browser.py drives /usr/bin/chromium with Playwright's driver;
# nothing downloads a browser of its own). Installed only when missing: measured on this
# 2-core machine, apt-get update ~2 s and the install ~22 s wall (chromium and its
# libraries, no recommends), once per machine. Without root or apt-get it says what to run
# and the test is skipped (outside CI, where a missing browser fails the test).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if ! command -v apt-get >/dev/null 2>&1; then \
	    echo "make test: no chromium and no apt-get: the dashboard's browser test is skipped"; \
	  elif [ "$$(id -u)" != 0 ]; then \
	    echo "make test: chromium is missing; as root: apt-get install -y --no-install-recommends chromium"; \
	  else \
	    echo "make test: installing Debian's chromium for the dashboard's browser test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends chromium >/dev/null; \
	  fi; }

bench: $(STAMP)
	$(PY) bench/ledger.py
	$(PY) bench/digest.py
	$(PY) bench/claims.py
	$(PY) bench/shared_state.py
	$(PY) bench/stream.py
	$(PY) bench/media.py
	$(PY) bench/router.py
	$(PY) bench/retention.py
	$(PY) bench/bot.py
	$(PY) bench/bot.py --replicas 3 --backend postgres

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# Extract the msgids from the code into messages.pot, merge them into every .po (new ones
# empty: translate them), and compile the committed .mo files (tests check all three).
locales: $(STAMP)
	$(PY) -m bot.text.catalogues
