"""``/`` (the catalogue), ``/docs`` (Swagger UI from the pinned ``swagger-ui-bundle-v2`` wheel)
and ``/map`` (``app/static/map``), every asset served by dpgate under a Content-Security-Policy
allowing this server only."""

from __future__ import annotations

import base64
import hashlib
import html
import re
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

from app.http.deps import SessionDep
from app.releases.public import base_url
from app.web.catalogue import catalogue_page
from app.web.context import router as context_router

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
STATIC_URL = "/static"
SWAGGER_URL = f"{STATIC_URL}/swagger-ui"
MAP_PAGE = STATIC_DIR / "map" / "index.html"
FAVICON_URL = f"{STATIC_URL}/favicon.svg"
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)

router = APIRouter()


def content_security_policy(
    *, inline_scripts: list[str] | None = None, image_origins: list[str] | None = None
) -> str:
    """Only this origin serves scripts, styles, images and fetches, plus ``inline_scripts`` by
    SHA-256 and images from ``image_origins``."""
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in inline_scripts or []
    ]
    return "; ".join(
        [
            "default-src 'self'",
            " ".join(["script-src 'self'", *hashes]),
            "style-src 'self' 'unsafe-inline'",  # Swagger UI sets inline styles
            " ".join(["img-src 'self' data:", *(image_origins or [])]),
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )


def _page_headers(csp: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": csp,
        "Cache-Control": "no-cache",  # revalidate: the page follows the settings
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }


@router.get("/", include_in_schema=False)
def catalogue(
    request: Request, session: SessionDep, offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0
) -> HTMLResponse:
    """The catalogue of public releases (no key, no script)."""
    page = catalogue_page(session, base_url(request), offset)
    return HTMLResponse(page, headers=_page_headers(content_security_policy()))


@router.get("/docs", include_in_schema=False)
def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI from the packaged copy; the ``APIKey`` scheme gives it Authorize."""
    page = get_swagger_ui_html(
        openapi_url=request.app.openapi_url,
        title=f"{request.app.title} — API docs",
        swagger_js_url=f"{SWAGGER_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{SWAGGER_URL}/swagger-ui.css",
        swagger_favicon_url=FAVICON_URL,
        swagger_ui_parameters={"validatorUrl": None},
    )
    html = bytes(page.body).decode()
    csp = content_security_policy(inline_scripts=_INLINE_SCRIPT.findall(html))
    return HTMLResponse(html, headers=_page_headers(csp))


# Like /docs, a page rather than an API operation: kept out of the OpenAPI document
# (whose operations all answer JSON) and described in the API's description instead.
@router.get("/map", include_in_schema=False, response_model=None)
def release_map(request: Request) -> FileResponse | HTMLResponse:
    """A stored release drawn as hexagons (``/map#release=<id>&key=<key>`` draws at once); with
    ``DPGATE_MAP_TILE_URL`` the page names that tile server and its policy allows it."""
    tile_url = request.app.state.settings.map_tile_url
    if tile_url is None:
        headers = _page_headers(content_security_policy())
        return FileResponse(MAP_PAGE, media_type="text/html", headers=headers)
    parts = urlsplit(tile_url)
    csp = content_security_policy(image_origins=[f"{parts.scheme}://{parts.netloc}"])
    meta = f'<meta name="dpgate-tile-url" content="{html.escape(tile_url)}">'
    page = MAP_PAGE.read_text().replace("</head>", f"{meta}\n</head>", 1)
    return HTMLResponse(page, headers=_page_headers(csp))


def install_pages(app: FastAPI) -> None:
    """Mount the pages and their static files (call with ``docs_url=None, redoc_url=None``)."""
    app.include_router(router)
    app.include_router(context_router)
    # The more specific mount first: Starlette matches mounts in order.
    app.mount(SWAGGER_URL, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")
    app.mount(STATIC_URL, StaticFiles(directory=STATIC_DIR), name="static")
