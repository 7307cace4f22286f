"""Mesilla's executors, each started as `python -m mesilla.executor.<name>`.

While `-m` locates the module, `sys.argv[0]` is "-m" (documented in Python's
command line reference), so that is when this package is imported in an
executor's process and nowhere else. Executors speak plain HTTP to their
agent unless it runs TLS (then it hands them LIBPROCESS_SSL_ENABLED): keeping
`ssl` out spares asyncio from loading it and libssl, ~16 ms of the ~150 ms
every pod's executor takes to start on a busy 2-core host.
"""

import os
import sys

_SSL_ENABLED = os.environ.get("LIBPROCESS_SSL_ENABLED", "").lower() in ("1", "true", "yes")
if sys.argv[:1] == ["-m"] and not _SSL_ENABLED:
    # None in sys.modules makes `import ssl` fail fast, as documented; typeshed wants a module.
    sys.modules.setdefault("ssl", None)  # type: ignore[arg-type]
