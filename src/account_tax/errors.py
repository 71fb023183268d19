"""The one error type for bad input: the message names the file, and the row and column if known."""


class DataError(Exception):
    """Input that the workflow cannot use. The message is meant for the person who owns the file."""
