"""`python -m lessor.apiserver`."""

import sys

from lessor.apiserver.server import main

sys.exit(main())
