"""`TfImportError`: every error of the TensorFlow importer, one line naming the file (and
the node, op or option) it is about."""

from flowc.ir.errors import FlowcError


class TfImportError(FlowcError):
    """A TensorFlow model flowc cannot import, or a bad --feed/--fetch/--config."""
