"""``python -m dpjax.audit``: see :mod:`dpjax.audit.cli`."""

from dpjax.audit.cli import main

raise SystemExit(main())
