"""The ``claw`` command (also ``python -m claw``).

Every command accepts ``--workspace DIR`` (default: ``$CLAW_WORKSPACE``, else the
current directory), ``--config FILE`` (default: ``$CLAW_CONFIG``, else ``claw.toml``
in the workspace when present) and ``--json``, before or after the subcommand; state lives in
``<workspace>/.claw`` unless the config says otherwise, so the embedded defaults need
no setup.

Conventions: exit code 0 on success, 1 when ``doctor`` finds problems, 2 on an error
(the same with and without ``--json``). An error is one line on stderr, never a
traceback unless ``--debug`` is given; with ``--json`` it is also a JSON object on
stdout, ``{"error": {"code": ..., "message": ...}}``. Warnings start with
``claw: warning:``. A closed pipe (``claw demo | head``) ends the command quietly.

The package has a module per command group (``_memory``, ``_sessions``, ``_doctor``,
``_serve``, ``_mcp``, ``_demo`` for ``demo`` and ``init``), each giving its parser and its
runner; ``_common`` holds what they share (options, errors, the local operator) and
``_app`` the entry point, dispatch and error reporting.
"""

from ._app import main as main
from ._common import CliError as CliError
from ._common import NotFoundError as NotFoundError
from ._common import UsageError as UsageError
from ._common import load_config as load_config
from ._parser import build_parser as build_parser
from ._progress import Progress as Progress
