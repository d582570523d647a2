import sys

from sparkls.cli import main

sys.exit(main())
