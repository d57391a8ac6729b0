"""The one error the replay parsers raise."""


class CaptureError(ValueError):
    """A capture cannot be read; the message says where."""
