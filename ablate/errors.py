"""Errors a user can fix. The CLI prints them as one line, never a traceback."""


class AblateError(Exception):
    """A problem with the user's input or environment, with the fix in the message."""


class BudgetExceeded(Exception):
    """Raised inside the agent loop when the next step would cross a budget limit."""

    def __init__(self, which: str, detail: str = ""):
        super().__init__(f"budget exhausted: {which} {detail}".strip())
        self.which = which
