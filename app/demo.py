"""``dpgate demo``: keys, a dataset, and a server on the embedded database."""

from __future__ import annotations

import uvicorn

from app.config import get_settings
from app.db.engine import make_engine, make_sessionmaker
from app.db.migrate import upgrade
from app.keys.service import create_key


def run_demo(*, host: str, port: int, data: str | None) -> int:
    settings = get_settings()
    upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    with make_sessionmaker(engine).begin() as session:
        _, admin = create_key(session, name="demo admin", role="admin")
        _, analyst = create_key(session, name="demo analyst", role="analyst")
    engine.dispose()
    base = f"http://{host}:{port}"
    print(f"admin key:   {admin}\nanalyst key: {analyst}\n")
    print(f"curl {base}/healthz")
    print(f"open {base}/docs")
    uvicorn.run("app.main:create_app", factory=True, host=host, port=port)
    return 0
