"""`python -m autograder.apps.exchange`."""
import sys

from autograder.apps.exchange.steps import main

if __name__ == "__main__":
    sys.exit(main())
