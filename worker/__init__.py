"""scalelab's distributed training worker; `python -m worker train --spec spec.json`."""

__version__ = "0.1.0"
