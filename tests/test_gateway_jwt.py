"""JWTAuth: which tokens prove a principal, which are refused and why, and how a key set URL is fetched and cached.

No test reaches the network: a key set URL is an aiohttp server on 127.0.0.1 started by the test.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer, make_mocked_request
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from think_actors.errors import ConfigurationError
from think_actors.gateway import jwt_auth
from think_actors.gateway.auth import AuthUnavailable, Unauthenticated
from think_actors.gateway.jwt_auth import JWTAuth
from think_actors.identity import Principal

ISSUER = "https://id.example.com/"
AUDIENCE = "think-actors"
HMAC_SECRET = "s" * 32


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def rsa_key2() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def public_pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def jwk(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPrivateKey):
        data = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    else:
        data = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**data, "kid": kid, "use": "sig"}


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "sub": "alice",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": now,
        "exp": now + 600,
        "roles": ["editor"],
        "scope": "read write",
    }
    base.update(changes)
    return {name: value for name, value in base.items() if value is not None}


def sign(payload: dict[str, Any], key: Any, alg: str = "RS256", kid: str | None = "k1") -> str:
    return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid} if kid else None)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def by_hand(
    header: dict[str, Any], payload: dict[str, Any], signature: bytes | None = None, secret: bytes = b""
) -> str:
    """A token assembled without PyJWT: with the given signature, or an HMAC-SHA256 one over ``secret``."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    if signature is None:
        signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest() if secret else b""
    return f"{signing_input}.{b64(signature)}"


def bearer(token: str) -> web.Request:
    return make_mocked_request("GET", "/agents/x/y", headers={"Authorization": f"Bearer {token}"})


async def refused(auth: JWTAuth, token: str) -> str:
    """The reason ``auth`` refuses ``token``, which never repeats it."""
    with pytest.raises(Unauthenticated) as caught:
        await auth(bearer(token))
    assert caught.value.sent is True
    assert token not in caught.value.reason
    return caught.value.reason


@pytest.fixture
def rs256(rsa_key: rsa.RSAPrivateKey) -> JWTAuth:
    return JWTAuth(algorithms=["RS256"], key=public_pem(rsa_key), issuer=ISSUER, audience=AUDIENCE)


class Clock:
    """The module's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(jwt_auth, "_monotonic", fake)
    return fake


class JwksServer:
    """A key set URL on 127.0.0.1 that counts its hits, can hold them at a gate, and can fail."""

    def __init__(self, keys: list[dict[str, Any]]):
        self.keys = keys
        self.hits = 0
        self.status = 200
        self.hit = asyncio.Event()
        self.gate: asyncio.Event | None = None
        app = web.Application()
        app.router.add_get("/jwks", self._serve)
        self.server = TestServer(app, host="127.0.0.1")

    async def _serve(self, request: web.Request) -> web.Response:
        self.hits += 1
        self.hit.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.status != 200:
            return web.Response(status=self.status, text="down for maintenance")
        return web.json_response({"keys": self.keys})

    @property
    def url(self) -> str:
        return str(self.server.make_url("/jwks"))


@pytest.fixture
async def jwks_server(rsa_key: rsa.RSAPrivateKey) -> AsyncIterator[JwksServer]:
    server = JwksServer([jwk(rsa_key, "k1")])
    await server.server.start_server()
    yield server
    await server.server.close()


def url_auth(server: JwksServer, **options: Any) -> JWTAuth:
    return JWTAuth(algorithms=["RS256", "ES256"], jwks_url=server.url, issuer=ISSUER, audience=AUDIENCE, **options)


# --- tokens that prove a principal -------------------------------------------------------------------------------


async def test_rs256_token_gives_its_principal(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    payload = claims()
    principal = await rs256(bearer(sign(payload, rsa_key)))
    assert principal == Principal(id="alice", roles=frozenset({"editor", "scope:read", "scope:write"}), claims=payload)


async def test_es256_token_from_a_jwks_file(tmp_path: Path, ec_key: ec.EllipticCurvePrivateKey) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk(ec_key, "ec1")]}))
    auth = JWTAuth(algorithms=["ES256"], jwks_file=path, issuer=ISSUER, audience=AUDIENCE)
    payload = claims(sub="bob", roles="admin ops", scope=None)
    principal = await auth(bearer(sign(payload, ec_key, alg="ES256", kid="ec1")))
    assert (principal.id, principal.roles, principal.claims) == ("bob", frozenset({"admin", "ops"}), payload)


async def test_a_scope_never_becomes_a_plain_role(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    principal = await rs256(bearer(sign(claims(roles=None, scope="admin"), rsa_key)))
    assert principal.roles == frozenset({"scope:admin"})
    assert not principal.has_role("admin")


async def test_hs256_token_with_a_shared_secret() -> None:
    auth = JWTAuth(algorithms=["HS256"], key=HMAC_SECRET, audience=AUDIENCE)
    principal = await auth(bearer(sign(claims(iss=None, roles=None, scope=None), HMAC_SECRET, alg="HS256")))
    assert (principal.id, principal.roles) == ("alice", frozenset())


async def test_token_in_the_cookie_and_in_the_query(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    token = sign(claims(), rsa_key)
    by_cookie = make_mocked_request("GET", "/agents/x/y", headers={"Cookie": f"think_actors_token={token}"})
    by_query = make_mocked_request("GET", f"/agents/x/y?token={token}")
    assert [(await rs256(by_cookie)).id, (await rs256(by_query)).id] == ["alice", "alice"]


async def test_leeway_accepts_a_just_expired_token(rsa_key: rsa.RSAPrivateKey) -> None:
    auth = JWTAuth(algorithms=["RS256"], key=public_pem(rsa_key), audience=AUDIENCE, leeway_s=30)
    principal = await auth(bearer(sign(claims(exp=int(time.time()) - 10), rsa_key)))
    assert principal.id == "alice"


# --- tokens refused, each with its reason ------------------------------------------------------------------------


async def test_missing_token_is_not_sent(rs256: JWTAuth) -> None:
    with pytest.raises(Unauthenticated) as caught:
        await rs256(make_mocked_request("GET", "/agents/x/y"))
    assert caught.value.sent is False
    assert caught.value.reason.startswith("missing token: ")


async def test_expired_token(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    assert await refused(rs256, sign(claims(exp=int(time.time()) - 10), rsa_key)) == "token expired"


async def test_token_not_valid_yet(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    later = int(time.time()) + 300
    assert (await refused(rs256, sign(claims(nbf=later), rsa_key))).startswith("token not valid yet")
    assert (await refused(rs256, sign(claims(iat=later), rsa_key))).startswith("token not valid yet")


async def test_wrong_issuer_and_audience(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    assert await refused(rs256, sign(claims(iss="https://evil.example.com/"), rsa_key)) == "wrong issuer"
    assert await refused(rs256, sign(claims(aud="another-app"), rsa_key)) == "wrong audience"


async def test_audience_in_the_token_but_none_configured(rsa_key: rsa.RSAPrivateKey) -> None:
    auth = JWTAuth(algorithms=["RS256"], key=public_pem(rsa_key))
    reason = await refused(auth, sign(claims(), rsa_key))
    assert reason == "wrong audience: the token names one and this server expects none"


async def test_missing_claims(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    assert await refused(rs256, sign(claims(exp=None), rsa_key)) == "token lacks the 'exp' claim"
    assert await refused(rs256, sign(claims(sub=None), rsa_key)) == "token lacks the 'sub' claim"
    assert await refused(rs256, sign(claims(iss=None), rsa_key)) == "token lacks the 'iss' claim"
    assert await refused(rs256, sign(claims(aud=None), rsa_key)) == "token lacks the 'aud' claim"


async def test_alg_none_is_refused_in_any_spelling(rs256: JWTAuth) -> None:
    for alg in ("none", "None", "NONE"):
        token = by_hand({"alg": alg, "typ": "JWT"}, claims())
        assert await refused(rs256, token) == "algorithm 'none' is not accepted"


async def test_hs256_signed_with_the_public_key_is_refused(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    # The key-confusion attack: the public PEM used as the HMAC secret.
    token = by_hand({"alg": "HS256", "typ": "JWT"}, claims(), secret=public_pem(rsa_key))
    assert await refused(rs256, token) == "algorithm 'HS256' is not accepted: this server accepts RS256"


async def test_unknown_algorithm_is_not_named(rs256: JWTAuth) -> None:
    token = by_hand({"alg": "<script>", "typ": "JWT"}, claims(), signature=b"x")
    assert await refused(rs256, token) == "the token's algorithm is not accepted: this server accepts RS256"


async def test_tampered_payload(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    header, _, signature = sign(claims(), rsa_key).split(".")
    forged = b64(json.dumps(claims(sub="mallory", roles=["admin"])).encode())
    assert await refused(rs256, f"{header}.{forged}.{signature}") == "bad signature"


async def test_signed_by_another_key(rs256: JWTAuth, rsa_key2: rsa.RSAPrivateKey) -> None:
    assert await refused(rs256, sign(claims(), rsa_key2)) == "bad signature"


async def test_malformed_tokens(rs256: JWTAuth) -> None:
    assert await refused(rs256, "not-a-jwt") == "malformed token"
    assert await refused(rs256, "a.b.c") == "malformed token"
    assert await refused(rs256, by_hand({"typ": "JWT"}, claims())) == "malformed token: its header names no algorithm"


async def test_token_over_16_kb(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    token = sign(claims(padding="x" * 16 * 1024), rsa_key)
    assert await refused(rs256, token) == "token too large: over 16 KB"


async def test_roles_claim_of_the_wrong_type(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    reason = await refused(rs256, sign(claims(roles={"admin": True}), rsa_key))
    assert reason == "the token's 'roles' claim is neither a list of strings nor a space-separated string"


async def test_subject_that_is_no_usable_id(rs256: JWTAuth, rsa_key: rsa.RSAPrivateKey) -> None:
    reason = await refused(rs256, sign(claims(sub="a" * 300), rsa_key))
    assert reason == "the token's 'sub' claim is not a usable id: 1-256 printable characters"


# --- key sets: choosing the key by kid ---------------------------------------------------------------------------


@pytest.fixture
def jwks_file(tmp_path: Path, rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk(rsa_key, "k1"), jwk(ec_key, "ec1")]}))
    return path


async def test_unknown_kid_in_a_jwks_file(jwks_file: Path, rsa_key2: rsa.RSAPrivateKey) -> None:
    auth = JWTAuth(algorithms=["RS256", "ES256"], jwks_file=jwks_file, audience=AUDIENCE)
    assert await refused(auth, sign(claims(), rsa_key2, kid="k9")) == "unknown key id (kid)"


async def test_kid_naming_a_key_of_another_type(jwks_file: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    auth = JWTAuth(algorithms=["RS256", "ES256"], jwks_file=jwks_file, audience=AUDIENCE)
    reason = await refused(auth, sign(claims(), rsa_key, kid="ec1"))
    assert reason == "the key the token's key id names is not a RS256 key"


async def test_token_without_kid(jwks_file: Path, rsa_key: rsa.RSAPrivateKey, tmp_path: Path) -> None:
    two_rsa = tmp_path / "two.json"
    two_rsa.write_text(json.dumps({"keys": [jwk(rsa_key, "k1"), jwk(rsa_key, "k2")]}))
    one = JWTAuth(algorithms=["RS256", "ES256"], jwks_file=jwks_file, audience=AUDIENCE)
    two = JWTAuth(algorithms=["RS256"], jwks_file=two_rsa, audience=AUDIENCE)
    token = sign(claims(), rsa_key, kid=None)
    assert (await one(bearer(token))).id == "alice"
    assert await refused(two, token) == "token names no key id (kid), and the key set holds 2 RS256 keys"


# --- key set URL: fetch, cache, refetch --------------------------------------------------------------------------


async def test_keys_fetched_once_for_50_concurrent_requests(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey
) -> None:
    auth = url_auth(jwks_server)
    jwks_server.gate = asyncio.Event()
    tokens = [sign(claims(sub=f"user{i}"), rsa_key) for i in range(50)]
    requests = asyncio.gather(*(auth(bearer(token)) for token in tokens))
    await jwks_server.hit.wait()
    jwks_server.gate.set()
    principals = await requests
    assert [p.id for p in principals] == [f"user{i}" for i in range(50)]
    assert (await auth(bearer(tokens[0]))).id == "user0"
    assert jwks_server.hits == 1


async def test_cache_expires_after_jwks_cache_s(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey, clock: Clock
) -> None:
    auth = url_auth(jwks_server, jwks_cache_s=300)
    token = sign(claims(), rsa_key)
    await auth(bearer(token))
    clock.now += 299
    await auth(bearer(token))
    assert jwks_server.hits == 1
    clock.now += 1
    await auth(bearer(token))
    assert jwks_server.hits == 2


async def test_rotated_key_is_picked_up_after_an_unknown_kid(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey, rsa_key2: rsa.RSAPrivateKey, clock: Clock
) -> None:
    auth = url_auth(jwks_server, min_refetch_s=30)
    assert (await auth(bearer(sign(claims(), rsa_key)))).id == "alice"
    jwks_server.keys = [jwk(rsa_key, "k1"), jwk(rsa_key2, "k2")]
    clock.now += 30
    assert (await auth(bearer(sign(claims(sub="bob"), rsa_key2, kid="k2")))).id == "bob"
    assert jwks_server.hits == 2


async def test_unknown_kid_refetch_is_rate_limited(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey, rsa_key2: rsa.RSAPrivateKey, clock: Clock
) -> None:
    auth = url_auth(jwks_server, min_refetch_s=30)
    await auth(bearer(sign(claims(), rsa_key)))
    stranger = sign(claims(), rsa_key2, kid="k9")
    clock.now += 30
    assert await refused(auth, stranger) == "unknown key id (kid)"  # refetched once
    assert await refused(auth, stranger) == "unknown key id (kid)"  # too soon: not refetched
    clock.now += 29
    assert await refused(auth, stranger) == "unknown key id (kid)"
    assert jwks_server.hits == 2
    clock.now += 1
    assert await refused(auth, stranger) == "unknown key id (kid)"
    assert jwks_server.hits == 3


async def test_server_down_at_start_is_unavailable(rsa_key: rsa.RSAPrivateKey) -> None:
    server = JwksServer([jwk(rsa_key, "k1")])
    await server.server.start_server()
    auth = url_auth(server)
    await server.server.close()
    with pytest.raises(AuthUnavailable) as caught:
        await auth(bearer(sign(claims(), rsa_key)))
    assert caught.value.reason.startswith("the signing keys could not be fetched: ")


async def test_failed_first_fetch_is_retried_by_the_next_request(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey
) -> None:
    auth = url_auth(jwks_server)
    token = sign(claims(), rsa_key)
    jwks_server.status = 503
    with pytest.raises(AuthUnavailable) as caught:
        await auth(bearer(token))
    assert caught.value.reason == f"the signing keys could not be fetched: {jwks_server.url} answered HTTP 503"
    jwks_server.status = 200
    assert (await auth(bearer(token))).id == "alice"
    assert jwks_server.hits == 2


async def test_requests_waiting_on_a_failed_fetch_do_not_start_another(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey
) -> None:
    auth = url_auth(jwks_server)
    jwks_server.status = 503
    jwks_server.gate = asyncio.Event()
    token = sign(claims(), rsa_key)
    requests = asyncio.gather(*(auth(bearer(token)) for _ in range(5)), return_exceptions=True)
    await jwks_server.hit.wait()
    jwks_server.gate.set()
    outcomes = await requests
    assert [type(outcome) for outcome in outcomes] == [AuthUnavailable] * 5
    assert jwks_server.hits == 1


async def test_server_down_later_keeps_the_cached_keys(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey, clock: Clock
) -> None:
    auth = url_auth(jwks_server, jwks_cache_s=300)
    token = sign(claims(), rsa_key)
    await auth(bearer(token))
    await jwks_server.server.close()
    clock.now += 600
    assert (await auth(bearer(token))).id == "alice"
    assert (await auth(bearer(token))).id == "alice"
    assert jwks_server.hits == 1


async def test_cancelled_request_does_not_cancel_the_shared_fetch(
    jwks_server: JwksServer, rsa_key: rsa.RSAPrivateKey
) -> None:
    auth = url_auth(jwks_server)
    jwks_server.gate = asyncio.Event()
    token = sign(claims(), rsa_key)
    first = asyncio.ensure_future(auth(bearer(token)))
    await jwks_server.hit.wait()
    second = asyncio.ensure_future(auth(bearer(token)))
    first.cancel()
    jwks_server.gate.set()
    assert (await second).id == "alice"
    assert first.cancelled()
    assert jwks_server.hits == 1


# --- configuration -----------------------------------------------------------------------------------------------


def config_error(make: Callable[[], object]) -> str:
    with pytest.raises(ConfigurationError) as caught:
        make()
    return str(caught.value)


def test_config_needs_algorithms(rsa_key: rsa.RSAPrivateKey) -> None:
    pem = public_pem(rsa_key)
    expected = "JWTAuth(algorithms=...) must be a non-empty list, such as ['RS256'] or ['ES256']"
    assert config_error(lambda: JWTAuth(algorithms=[], key=pem)) == expected
    assert config_error(lambda: JWTAuth(algorithms="RS256", key=pem)) == expected
    assert "'RS257', which is not a JWS algorithm" in config_error(lambda: JWTAuth(algorithms=["RS257"], key=pem))


def test_config_refuses_none(rsa_key: rsa.RSAPrivateKey) -> None:
    pem = public_pem(rsa_key)
    for listed in (["none"], ["RS256", "None"]):
        with pytest.raises(ConfigurationError) as caught:
            JWTAuth(algorithms=listed, key=pem)
        assert str(caught.value).startswith("JWTAuth(algorithms=...) must not hold 'none': it accepts unsigned tokens")


def test_config_refuses_hmac_mixed_with_public_key_algorithms(rsa_key: rsa.RSAPrivateKey) -> None:
    message = config_error(lambda: JWTAuth(algorithms=["RS256", "HS256"], key=public_pem(rsa_key)))
    assert message.startswith("JWTAuth(algorithms=...) mixes HMAC (HS*) with public-key algorithms")


def test_config_needs_exactly_one_key_source(rsa_key: rsa.RSAPrivateKey, jwks_file: Path) -> None:
    two = config_error(lambda: JWTAuth(algorithms=["RS256"], key=public_pem(rsa_key), jwks_file=jwks_file))
    none = config_error(lambda: JWTAuth(algorithms=["RS256"]))
    assert two.startswith("JWTAuth needs exactly one key source: key= ")
    assert two.endswith("got key, jwks_file")
    assert none.endswith("got none")


def test_config_refuses_unusable_keys(rsa_key: rsa.RSAPrivateKey) -> None:
    private = rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    assert config_error(lambda: JWTAuth(algorithms=["RS256"], key=private)) == (
        "JWTAuth(key=...) is a private key: give the public key (the gateway only verifies)"
    )
    assert config_error(lambda: JWTAuth(algorithms=["RS256"], key="not a pem")) == (
        "JWTAuth(key=...) is not usable for RS256: give a PEM public key"
    )
    assert config_error(lambda: JWTAuth(algorithms=["HS256"], key=public_pem(rsa_key))) == (
        "JWTAuth(key=...) is not usable for HS256: give an HMAC secret (not a PEM key)"
    )
    assert config_error(lambda: JWTAuth(algorithms=["HS256"], key="short")).startswith(
        "JWTAuth(key=...) is too weak for HS256: "
    )


def test_config_refuses_a_plain_http_jwks_url() -> None:
    message = config_error(lambda: JWTAuth(algorithms=["RS256"], jwks_url="http://id.example.com/jwks"))
    assert message.startswith("JWTAuth(jwks_url='http://id.example.com/jwks') must be an https:// URL")


def test_config_refuses_a_bad_jwks_file(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text('{"kty": "RSA"}')
    assert config_error(lambda: JWTAuth(algorithms=["RS256"], jwks_file=path)) == (
        f'JWTAuth(jwks_file={str(path)!r}) is not a JWK set: expected a JSON object {{"keys": [...]}}'
    )
    missing = tmp_path / "missing.json"
    assert config_error(lambda: JWTAuth(algorithms=["RS256"], jwks_file=missing)).startswith(
        "JWTAuth(jwks_file=...) could not be read: "
    )
