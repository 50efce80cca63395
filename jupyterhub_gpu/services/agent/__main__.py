"""``python -m jupyterhub_gpu.services.agent``: run the node agent."""

from jupyterhub_gpu.services.agent.app import main

if __name__ == "__main__":
    main()
