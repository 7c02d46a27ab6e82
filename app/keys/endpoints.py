from __future__ import annotations

from decimal import Decimal
from functools import partial

from fastapi import APIRouter, Response, status

from app.http.deps import AdminKey, ReaderKey, SessionDep
from app.http.query_params import CheckedRoute
from app.keys import service
from app.keys.schemas import KeyCreate, KeyCreated, KeyList, KeyMe
from app.kit.errors import Conflict, Forbidden, NotFound, Unauthenticated, responses
from app.kit.ids import KeyId
from app.ledger.service import key_spent

router = APIRouter(tags=["keys"], route_class=CheckedRoute)


@router.post(
    "/keys",
    status_code=status.HTTP_201_CREATED,
    response_model=KeyCreated,
    responses=responses(Unauthenticated, Forbidden),
    summary="Issue an API key (admin)",
)
def create_key(body: KeyCreate, _: AdminKey, session: SessionDep) -> KeyCreated:
    key, secret = service.create_key(
        session, name=body.name, role=body.role, epsilon_quota=body.epsilon_quota
    )
    shown = service.key_out(key, Decimal(0)).model_dump(include=set(KeyCreated.model_fields))
    return KeyCreated(key=secret, **shown)


@router.get(
    "/keys",
    response_model=KeyList,
    responses=responses(Unauthenticated, Forbidden),
    summary="Every key with its quota, spend and whether it is revoked (admin)",
)
def list_keys(_: AdminKey, session: SessionDep) -> KeyList:
    return KeyList(keys=service.list_keys(session, partial(key_spent, session)))


@router.get(
    "/keys/me",
    response_model=KeyMe,
    responses=responses(Unauthenticated, Forbidden),
    summary="The calling key: quota, spend and what is left",
)
def key_me(key: ReaderKey, session: SessionDep) -> KeyMe:
    return service.key_me(session, key, partial(key_spent, session))


@router.delete(
    "/keys/{key_id:id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=responses(Unauthenticated, Forbidden, NotFound, Conflict),
    summary="Revoke a key (admin): it answers 401 on every server process within 1 s",
    description="The last active admin key cannot be revoked (409 `conflict`): create "
    "another admin key first.",
)
def revoke_key(key_id: KeyId, _: AdminKey, session: SessionDep) -> Response:
    service.revoke_key(session, key_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
