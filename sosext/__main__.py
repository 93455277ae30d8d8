import sys

from .cli import main  # stdlib only at import: main() first checks that this Python can run sosext

sys.exit(main())
