from jupyterhub_gpu.services.ssh.app import main

main()
