import sys

from routerscope.cli import main

sys.exit(main())
