"""``python -m jupyterhub_gpu.agent``: run the node agent."""

from .app import main

if __name__ == "__main__":
    main()
