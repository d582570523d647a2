import sys

from sparkls.tools.cli import main

# The guard matters: vLLM starts its engine-core process with `spawn`, which re-imports this
# module as `__mp_main__`; without it the child would start a second language server.
if __name__ == "__main__":
    sys.exit(main())
