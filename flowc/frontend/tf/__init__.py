"""TensorFlow models in, without TensorFlow: `import_tf` reads a frozen GraphDef (.pb) or a
SavedModel directory (see importer.py); `protos` builds the message classes it parses them
with, `bundle` reads a SavedModel's checkpoint, `rules` is the op table."""

from flowc.frontend.tf.errors import TfImportError
from flowc.frontend.tf.feeds import Feed, Fetch
from flowc.frontend.tf.importer import import_tf

__all__ = ["Feed", "Fetch", "TfImportError", "import_tf"]
