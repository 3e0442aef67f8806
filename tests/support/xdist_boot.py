"""execnet's ``popen`` bootstrap (``python -c BOOTSTRAP``) as a module, for a pytest-xdist
worker forked from the fork server (:mod:`tests.support.worker_launcher`): it reads the
gateway's code from stdin and runs it, as ``execnet.gateway_io.popen_bootstrapline`` does."""

import sys

exec(eval(sys.stdin.readline()))  # noqa: S102, S307 - execnet's own bootstrap, from the controller
