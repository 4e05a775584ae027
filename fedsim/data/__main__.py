"""``python -m fedsim.data [fetch [--list] NAME ...]``: the data cache's command (:mod:`fedsim.data.fetch`)."""

import sys

from fedsim.data.fetch import main

if __name__ == "__main__":
  sys.exit(main())
