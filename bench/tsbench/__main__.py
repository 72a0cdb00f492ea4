"""Entry point: `python3 bench/tsbench ARGS` (the folder run as a script)
and `python3 -m tsbench ARGS` (with bench/ on the path) both run
tsbench.cli.main().
"""

import os
import sys

if not __package__:
    # Run as a folder, sys.path[0] is this folder: the package is imported
    # from the one above it instead, so its modules never shadow others.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from tsbench import cli  # noqa: E402 (after the path is set)

sys.exit(cli.main())
