"""jupyterhub-gpu: JupyterHub on a handful of heterogeneous GPU servers."""

#: the one version source: setup.cfg reads it (``attr:``), ``jupyterhub-gpu --version``,
#: the agent and the services print it
__version__ = "0.1.0"
