"""The SSH gateway's decisions (docs/ssh.md), pure: who an SSH login names
(:mod:`.logins`), whether an ``authorized_keys`` may be trusted as sshd's StrictModes would
(:mod:`.access`), when failed attempts are refused for a while (:mod:`.limits`), and what
a session's log lines and the user's sentences say (:mod:`.sessions`). The gateway's I/O
is :mod:`jupyterhub_gpu.edges.ssh_keys`, :mod:`jupyterhub_gpu.edges.docker_exec` and the
service :mod:`jupyterhub_gpu.services.ssh`."""
