"""`python -m lessor.runner`: the runner, for images that install lessor."""

import sys

from lessor.runner.runner import main

sys.exit(main())
