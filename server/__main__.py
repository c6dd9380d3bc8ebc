"""`python -m server`: the admin command (server/admin.py)."""

import sys

from server.admin import main

sys.exit(main())
