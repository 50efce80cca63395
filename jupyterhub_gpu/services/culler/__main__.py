from jupyterhub_gpu.services.culler.app import main

main()
