import sys

from lra.cli import main

sys.exit(main())
