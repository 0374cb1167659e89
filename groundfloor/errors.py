"""The one exception type for bad user input: printed as a single line, exit status 2."""


class UserError(Exception):
    """Bad input (config value, file, missing package): the message is shown as is, no traceback."""
