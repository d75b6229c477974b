import sys

from hnbench.cli import main

sys.exit(main())
