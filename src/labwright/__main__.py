"""`python -m labwright` runs the same CLI as the `labwright` command, exit code included."""

import sys

from labwright.cli import main

if __name__ == "__main__":
    sys.exit(main())
