#!/usr/bin/env bash
# Regenerate the initial Alembic revision from the models (only while nothing has
# been released: afterwards, add new revisions with `alembic revision --autogenerate`).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python}
tmp=$(mktemp -d)
rm -f migrations/versions/0001_initial.py
# later hand-written revisions depend on 0001: keep them aside while it is rebuilt
aside=$(mktemp -d)
find migrations/versions -name '0[0-9][0-9][0-9]_*.py' ! -name '0001_*' -exec mv {} "$aside"/ \;
trap 'mv "$aside"/*.py migrations/versions/ 2>/dev/null || true' EXIT
DPGATE_DATABASE_URL="sqlite:///$tmp/empty.db" "$py" -m alembic -c alembic.ini \
  -x url="sqlite:///$tmp/empty.db" revision --autogenerate -m initial --rev-id 0001 >/dev/null
f=$(ls migrations/versions/0001_*.py)
[ "$f" = migrations/versions/0001_initial.py ] || mv "$f" migrations/versions/0001_initial.py
"$py" -m ruff format -q migrations/versions/0001_initial.py || true
rm -rf "$tmp"
echo "wrote migrations/versions/0001_initial.py"
