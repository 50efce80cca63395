#!/usr/bin/env bash
# The main job: a hub on http://127.0.0.1:8000 with the local engine as a GPU node
# (declared 2-GPU demo inventory) and real LDAP logins against a private demo directory
# (slapd on 127.0.0.1:${LDAP_PORT:-3890}, state in .demo/ldap, users from
# scripts/ldap/demo.ldif). Installs what is missing; safe to run again.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
scripts/bootstrap.sh
scripts/cluster.sh up 1
# homes made by the earlier DummyAuthenticator demo belong to uid 1000, and the hub rightly
# refuses a home owned by someone else: move them aside once, keep them
if [[ -d .demo/homes && ! -f .demo/homes-are-ldap ]] && [[ -n $(ls -A .demo/homes) ]]; then
  aside=.demo/homes.before-ldap.$(date +%Y%m%d%H%M%S)
  echo "[demo] homes of the old demo (not LDAP uids) moved to $aside"
  mv .demo/homes "$aside"
fi
mkdir -p .demo/homes
touch .demo/homes-are-ldap
# the demo directory: started once (reused when it runs), loaded with the demo LDIF once
ldap_env=$(scripts/ldap-server.sh start --dir .demo/ldap --ldif scripts/ldap/demo.ldif)
eval "$ldap_env"
export LDAP_HOST LDAP_PORT
# "My images": a registry the node reaches, and a folder of wheels (the site's package
# mirror: containers here have no route out) mounted read-only in every server at /srv/wheels
registry_env=$(scripts/registry.sh start --dir .demo/registry) || registry_env=""
eval "$registry_env"
mkdir -p .demo/wheels
if [[ -n ${ADDR:-} ]]; then
  export JHGPU_DEMO_REGISTRY=$ADDR
  if ! ls .demo/wheels/*.whl >/dev/null 2>&1; then  # best effort: needs the internet once
    timeout 120 .venv/bin/pip download -q --only-binary :all: --no-deps -d .demo/wheels \
      six==1.17.0 einops==0.8.0 idna==3.10 >/dev/null 2>&1 \
      || echo "[demo] no wheels fetched for My images (offline?): put some in .demo/wheels"
  fi
fi
cat <<EOF
[demo] open http://127.0.0.1:8000 and log in with the demo LDAP (public passwords):
[demo]   alice / alice-gpu, bob / bob-gpu, carol / carol-gpu (admin)
[demo]   dave / dave-gpu (no uidNumber) and erin / erin-gpu (not in gpu-users) are refused
[demo] slapd: $LDAP_URL (pid $LDAP_PID; stop it with scripts/ldap-server.sh stop)
[demo] My images: registry ${ADDR:-(none: saving off)}; in a server, pip install --user
[demo]   --no-index --find-links /srv/wheels einops, then save it on the My images page
EOF
exec .venv/bin/jupyterhub -f scripts/demo/jupyterhub_config.py
