"""slurm-harp: right-size Slurm job requests at submit time from the site's own accounting."""

__version__ = "0.1.0"
# How harp's commands log (cli.py), and the daemon's advice process alike (server/advice_process.py).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
