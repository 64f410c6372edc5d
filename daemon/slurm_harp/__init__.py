"""slurm-harp: right-size Slurm job requests at submit time from the site's own accounting."""

__version__ = "0.1.0"
