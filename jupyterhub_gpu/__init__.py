"""jupyterhub-gpu: JupyterHub on a handful of heterogeneous GPU servers."""

__version__ = "0.1.0"
