from __future__ import annotations

from fastapi import APIRouter, status

from app.deps import AdminKey, SessionDep
from app.errors import Forbidden, Unauthenticated, responses
from app.keys import service
from app.keys.schemas import KeyCreate, KeyCreated

router = APIRouter(tags=["keys"])


@router.post(
    "/keys",
    status_code=status.HTTP_201_CREATED,
    response_model=KeyCreated,
    responses=responses(Unauthenticated, Forbidden),
    summary="Issue an API key (admin)",
)
def create_key(body: KeyCreate, session: SessionDep, _: AdminKey) -> KeyCreated:
    key, secret = service.create_key(
        session, name=body.name, role=body.role, epsilon_quota=body.epsilon_quota
    )
    return KeyCreated(
        id=key.id, key=secret, role=key.role, name=key.name, epsilon_quota=body.epsilon_quota
    )
