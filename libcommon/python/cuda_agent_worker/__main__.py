"""Entry point: python3 -m cuda_agent_worker --device cpu|cuda:N (see PROTOCOL.md)."""
import sys

from .worker import main

sys.exit(main())
