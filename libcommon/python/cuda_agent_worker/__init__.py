"""cuda_agent_worker: the reference worker (PyTorch for references, baselines, filters), run as
`python3 -m cuda_agent_worker`. The protocol is PROTOCOL.md beside this file."""

__version__ = "1"
