from jupyterhub_gpu.services.dashboard.app import main

main()
