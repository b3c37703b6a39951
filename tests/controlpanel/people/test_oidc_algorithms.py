"""The ID token's header check alone (accounts/oidc.check_id_token_algorithm), beside the
sign-in over HTTP of test_oidc: only the provider's key pair signs a token this panel takes;
HS256 (keyed with the client secret, which the panel holds too) and `none` are refused with
the reason, before any signature is looked at."""

from __future__ import annotations

import base64
import json

import pytest

from controlpanel.accounts.oidc import OidcError, check_id_token_algorithm


def _token(header: dict[str, str]) -> str:
    def part(value: dict[str, str]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part(header)}.{part({'sub': 'mallory', 'iss': 'https://sso'})}.c2ln"


@pytest.mark.parametrize("alg", ["RS256", "PS384", "ES256"])
def test_a_key_pairs_algorithm_passes_on_to_the_signature_check(alg: str) -> None:
    check_id_token_algorithm(_token({"alg": alg, "kid": "k1"}))  # no refusal


@pytest.mark.parametrize("alg", ["HS256", "HS512", "none", "None", ""])
def test_a_shared_secret_or_no_signature_is_refused_with_the_reason(alg: str) -> None:
    with pytest.raises(OidcError) as refused:
        check_id_token_algorithm(_token({"alg": alg}))
    said = str(refused.value)
    assert said.startswith(f"The ID token is signed with {alg};")
    assert "accepts only the provider's key pair" in said and "RS256" in said


def test_a_header_without_alg_or_no_jwt_at_all_is_refused() -> None:
    with pytest.raises(OidcError, match="signed with None;"):
        check_id_token_algorithm(_token({"typ": "JWT"}))
    with pytest.raises(OidcError, match="not a JWT"):
        check_id_token_algorithm("%%%.e30.")
