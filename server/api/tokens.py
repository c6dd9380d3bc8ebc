"""A user's own API tokens, for scripts and the `scalelab` command: made, listed and revoked by their owner."""

from __future__ import annotations

from fastapi import APIRouter, status

from server.api.deps import CurrentUser, SessionDep, UserByPassword
from server.api.errors import not_found
from server.models import ApiTokenCreated, ApiTokenPublic, ApiTokensPublic
from server.services import users

router = APIRouter(prefix="/api/tokens", tags=["tokens"])


@router.get("", response_model=ApiTokensPublic, summary="List your API tokens (never their secrets)")
def list_tokens(user: CurrentUser, session: SessionDep) -> ApiTokensPublic:
    tokens = [
        ApiTokenPublic.model_validate(token, from_attributes=True) for token in users.tokens_of(session, user.name)
    ]
    return ApiTokensPublic(data=tokens, count=len(tokens))


@router.post(
    "",
    response_model=ApiTokenCreated,
    status_code=status.HTTP_201_CREATED,
    summary="Make yourself a new API token",
    description="Signed in (a token, or the pages' session with its CSRF header), or with your user name and "
    "password as HTTP Basic credentials, which is how `scalelab login` gets its first token. The token is in this "
    "answer only: scalelab keeps its hash.",
)
def create_token(user: UserByPassword, session: SessionDep) -> ApiTokenCreated:
    token, secret = users.new_token(session, user)
    return ApiTokenCreated(**ApiTokenPublic.model_validate(token, from_attributes=True).model_dump(), token=secret)


@router.delete(
    "/{token_id}", response_model=ApiTokenPublic, summary="Revoke one of your API tokens", responses=not_found("token")
)
def revoke_token(token_id: str, user: CurrentUser, session: SessionDep) -> ApiTokenPublic:
    return ApiTokenPublic.model_validate(users.revoke_token(session, user, token_id), from_attributes=True)
