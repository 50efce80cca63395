from jupyterhub_gpu.services.usage.app import main

main()
