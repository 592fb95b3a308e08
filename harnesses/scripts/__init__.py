"""Scripts that run inside the agent's sandbox: they load the agent's code, so they never run in the
runner. measure.py and profile.py are the mechanisms' (``python -c``, with arguments), kept as files
so each record hashes them; check.py is the scripted policy's own test (harnesses/scripted), which it
writes into the workspace with the trial's values in its first four settings."""
