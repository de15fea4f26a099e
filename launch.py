"""Start the attention viewer: python launch.py [--port 7860] [--host 127.0.0.1] [--device cpu]."""
import sys

from viewer.app import main

if __name__ == "__main__":
    sys.exit(main())
