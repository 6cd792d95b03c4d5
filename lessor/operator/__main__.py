"""`python -m lessor.operator`."""

import sys

from lessor.operator.main import main

sys.exit(main())
