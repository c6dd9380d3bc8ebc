"""scalelab's web service: experiments in, Slurm jobs out, metrics back. Never imports torch."""

__version__ = "0.1.0"
