import sys

from mesilla.cli import main

sys.exit(main())
