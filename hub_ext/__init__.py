"""classhub: a JupyterHub extension that turns a stock JupyterHub into a GPU teaching platform."""

__version__ = "0.1.0"
