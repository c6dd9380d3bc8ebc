"""A user's own API tokens, for scripts and the `scalelab` command: made, listed and revoked by their owner."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Request, status

from server.api.deps import CurrentUser, SessionDep, UserByPassword, bearer_digest
from server.api.errors import UNREADABLE_BODY, not_found
from server.models import ApiTokenCreated, ApiTokenPublic, ApiTokenRequest, ApiTokensPublic
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
    "answer only: scalelab keeps its hash. It lasts `lifetime_days` (none: until revoked); one made with another "
    "token ends no later than that token, and is revoked with it. Too many failed passwords for a name or from an "
    "address answer 429, and a server busy checking others' passwords 503, both with Retry-After.",
    responses={
        **UNREADABLE_BODY,
        429: {"description": "too many failed sign-ins for this name or from this address: try after Retry-After"},
        503: {"description": "every password check of this server process is busy: try after Retry-After"},
    },
)
def create_token(
    user: UserByPassword, session: SessionDep, request: Request, wanted: ApiTokenRequest | None = None
) -> ApiTokenCreated:
    lifetime = timedelta(days=wanted.lifetime_days) if wanted is not None and wanted.lifetime_days else None
    # Made with a token (not a password, nor a page's session): it never outlives that token.
    token, secret = users.new_token(session, user, lifetime, maker_hash=bearer_digest(request))
    return ApiTokenCreated(**ApiTokenPublic.model_validate(token, from_attributes=True).model_dump(), token=secret)


@router.delete(
    "/{token_id}", response_model=ApiTokenPublic, summary="Revoke one of your API tokens", responses=not_found("token")
)
def revoke_token(token_id: str, user: CurrentUser, session: SessionDep) -> ApiTokenPublic:
    return ApiTokenPublic.model_validate(users.revoke_token(session, user, token_id), from_attributes=True)
