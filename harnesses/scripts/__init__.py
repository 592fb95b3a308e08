"""Scripts a mechanism runs inside the agent's sandbox (``python -c``, with arguments): they load
the agent's code, so they never run in the runner. Kept as files so each record hashes them."""
