"""The SSH gateway, a hub-managed service (``python -m jupyterhub_gpu.services.ssh``;
docs/ssh.md): ``ssh alice@hub`` opens a shell, or runs a command, inside alice's running
server, as her uid:gid, in her home. :mod:`.app` is the ``GPUSSHGateway`` application,
:mod:`.hub` its calls to the hub API, :mod:`.server` who gets in (asyncssh's callbacks),
:mod:`.session` a session bridged to ``docker exec`` in the server's container. The
decisions are :mod:`jupyterhub_gpu.core.ssh`; the files and the engine are
:mod:`jupyterhub_gpu.edges.ssh_keys` and :mod:`jupyterhub_gpu.edges.docker_exec`."""
