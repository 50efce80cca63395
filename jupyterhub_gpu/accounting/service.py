"""Old path, kept for existing configurations; the code is in
:mod:`jupyterhub_gpu.services.usage`."""

from jupyterhub_gpu.services.usage.app import main

if __name__ == "__main__":
    main()
