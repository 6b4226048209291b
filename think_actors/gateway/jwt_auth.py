"""Authentication by a signed JWT: the gateway checks the token an identity provider issued, and trusts its claims.

``JWTAuth`` is an authenticator (see ``auth.py``): it reads the credential, verifies it, and returns the
``Principal`` its claims name. A request is checked in this order, and the first rule that fails refuses it
(``Unauthenticated``, a 401, whose reason names what is wrong and never repeats the token):

1. No credential: ``missing token`` (``sent=False``). Over 16 KB, or not ASCII: refused before any parsing.
2. The header, read unverified only to choose: its ``alg`` must be one of ``algorithms`` (``none`` never is, in
   any case), its ``kid`` picks the key.
3. The key: ``key=`` is the one key; with a key set (``jwks_file=`` / ``jwks_url=``) the ``kid`` must name a key
   of the algorithm's type (RSA for RS/PS, EC for ES, OKP for EdDSA, oct for HS). A token without ``kid`` is
   accepted only when the set holds one such key.
4. ``jwt.decode`` with that key and that one algorithm: the signature, then ``exp`` / ``nbf`` / ``iat`` (with
   ``leeway_s``), ``iss``, ``aud`` and the required claims.
5. The principal: ``id_claim`` must be a non-empty string; roles come from ``roles_claim`` and ``scope_claim``.

Why the algorithm list is checked at configuration: an HMAC secret and a public key are both "a key", so a
verifier that accepts HS256 and RS256 with one public key lets anyone sign an HS256 token with the public key as
the secret (the key-confusion attack). ``JWTAuth`` refuses ``none`` and refuses HS* mixed with anything else.

A key set URL is fetched with aiohttp and kept ``jwks_cache_s``; a fetch under way is shared by every request
waiting on it. An unknown ``kid`` refetches (a key rotation), at most once per ``min_refetch_s``. A failed fetch
keeps the keys already held; with none held, the request gets ``AuthUnavailable`` (a 503) and the next request
tries again. What it does not cover: an unknown ``kid`` while the provider is unreachable is refused as unknown
(a 401), since it cannot be told from a forged one; publish a new key before signing with it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from jwt.algorithms import get_default_algorithms

from ..errors import ConfigurationError
from ..identity import Principal
from .auth import AuthUnavailable, Unauthenticated, credential

__all__ = ["MAX_TOKEN_BYTES", "JWTAuth"]

MAX_TOKEN_BYTES = 16 * 1024
_MAX_JWKS_BYTES = 1024 * 1024

# The key type (JWK "kty") each algorithm family verifies with.
_KEY_TYPES = {"HS": "oct", "RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
_PRIVATE_KEYS = (
    rsa.RSAPrivateKey,
    ec.EllipticCurvePrivateKey,
    ed25519.Ed25519PrivateKey,
    ed448.Ed448PrivateKey,
)
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}

# Tests move this clock to expire a cache without waiting.
_monotonic = time.monotonic


def _words(value: Any) -> list[str] | None:
    """A claim's strings: a list of strings, or a space-separated string; None for anything else."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    return None


class _Jwk:
    """One verification key of a key set, and the ``PyJWK`` made of it for each algorithm it served."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.kid: str | None = data.get("kid") if isinstance(data.get("kid"), str) else None
        self._built: dict[str, jwt.PyJWK] = {}

    def fits(self, alg: str) -> bool:
        return self.data.get("kty") == _KEY_TYPES.get(alg[:2]) and self.data.get("alg", alg) == alg

    def for_alg(self, alg: str) -> jwt.PyJWK:
        built = self._built.get(alg)
        if built is None:
            built = self._built[alg] = jwt.PyJWK(self.data, algorithm=alg)
        return built


def _parse_jwks(data: Any) -> list[_Jwk]:
    """The signature keys of a JWKS document; ValueError (without key material) when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise ValueError('expected a JSON object {"keys": [...]}')
    keys: list[_Jwk] = []
    for item in data["keys"]:
        if not isinstance(item, dict) or not isinstance(item.get("kty"), str):
            raise ValueError("every key must be an object with a 'kty'")
        if item.get("use", "sig") != "sig":  # an encryption key never verifies a signature
            continue
        ops = item.get("key_ops")
        if isinstance(ops, list) and "verify" not in ops:
            continue
        keys.append(_Jwk(item))
    return keys


class JWTAuth:
    """Authentication by a JWT signed by your identity provider; the principal is the token's subject.

    Give the algorithms and exactly one key source: ``key=`` (a PEM public key, or an HMAC secret for HS*),
    ``jwks_file=`` (a JWK set read once, now) or ``jwks_url=`` (fetched, cached ``jwks_cache_s``, refetched for
    an unknown ``kid`` at most once per ``min_refetch_s``; https, or http to localhost only).

    The principal's id is the ``id_claim``; its roles are the ``roles_claim`` (a list of strings or a
    space-separated string) plus each scope of ``scope_claim`` prefixed ``scope:`` (so a client granted the
    OAuth scope ``admin`` does not get the role ``admin``); its claims are the whole verified payload. Set either
    claim to None to ignore it. ``issuer`` and ``audience``, when given, are required and must match; a token
    naming an audience is refused when none is configured (RFC 7519 §4.1.3). ``required_claims`` must be present
    (``exp`` by default); the ``id_claim`` always is.

    Raises:
        ConfigurationError: from the constructor, for a bad or unsafe configuration.
    """

    def __init__(
        self,
        *,
        algorithms: Sequence[str],
        key: str | bytes | None = None,
        jwks_file: str | Path | None = None,
        jwks_url: str | None = None,
        issuer: str | None = None,
        audience: str | Sequence[str] | None = None,
        leeway_s: float = 0,
        required_claims: Sequence[str] = ("exp",),
        id_claim: str = "sub",
        roles_claim: str | None = "roles",
        scope_claim: str | None = "scope",
        jwks_cache_s: float = 300,
        min_refetch_s: float = 30,
        fetch_timeout_s: float = 5,
    ):
        self.algorithms = _check_algorithms(algorithms)
        self.issuer = _check_issuer(issuer)
        self.audience = _check_audience(audience)
        for name, value in (("leeway_s", leeway_s), ("min_refetch_s", min_refetch_s)):
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigurationError(f"JWTAuth({name}=...) must be a number of seconds >= 0, not {value!r}")
        for name, value in (("jwks_cache_s", jwks_cache_s), ("fetch_timeout_s", fetch_timeout_s)):
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ConfigurationError(f"JWTAuth({name}=...) must be a number of seconds > 0, not {value!r}")
        if not isinstance(id_claim, str) or not id_claim:
            raise ConfigurationError("JWTAuth(id_claim=...) must name a claim, such as 'sub'")
        for name, claim in (("roles_claim", roles_claim), ("scope_claim", scope_claim)):
            if claim is not None and (not isinstance(claim, str) or not claim):
                raise ConfigurationError(f"JWTAuth({name}=...) must name a claim, or be None to ignore it")
        if isinstance(required_claims, str) or not all(isinstance(c, str) and c for c in required_claims):
            raise ConfigurationError("JWTAuth(required_claims=...) must be a list of claim names, such as ['exp']")
        self.leeway_s = float(leeway_s)
        self.id_claim = id_claim
        self.roles_claim = roles_claim
        self.scope_claim = scope_claim
        require = {*required_claims, id_claim}
        if self.issuer is not None:
            require.add("iss")
        if self.audience is not None:
            require.add("aud")
        self.required_claims = tuple(sorted(require))
        self.jwks_cache_s = float(jwks_cache_s)
        self.min_refetch_s = float(min_refetch_s)
        self.fetch_timeout_s = float(fetch_timeout_s)

        given = [name for name, value in (("key", key), ("jwks_file", jwks_file), ("jwks_url", jwks_url)) if value]
        if len(given) != 1:
            raise ConfigurationError(
                "JWTAuth needs exactly one key source: key= (a PEM public key, or an HMAC secret for HS*), "
                f"jwks_file= or jwks_url=; got {', '.join(given) or 'none'}"
            )
        self.jwks_url = _check_url(jwks_url) if jwks_url else None
        self._key = _prepare_key(key, self.algorithms) if key else None
        self._keys: list[_Jwk] | None = _read_jwks_file(jwks_file) if jwks_file else None
        self._fetched_at: float | None = None  # when the URL's keys were last fetched
        self._attempted_at: float | None = None  # when a fetch of the URL last ended, well or not
        self._fetch_error = ""
        self._fetching: asyncio.Task[None] | None = None

    async def __call__(self, request: web.Request) -> Principal:
        token = credential(request)
        if token is None:
            raise Unauthenticated(
                "missing token: send Authorization: Bearer <JWT>, the think_actors_token cookie, or ?token=",
                sent=False,
            )
        return await self.verify(token)

    async def verify(self, token: str) -> Principal:
        """The principal ``token`` proves; ``Unauthenticated`` or ``AuthUnavailable`` as for a request."""
        if len(token) > MAX_TOKEN_BYTES:
            raise Unauthenticated(f"token too large: over {MAX_TOKEN_BYTES // 1024} KB")
        if not token.isascii():
            raise Unauthenticated("malformed token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthenticated("malformed token") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or not alg:
            raise Unauthenticated("malformed token: its header names no algorithm")
        if alg.lower() == "none":
            raise Unauthenticated("algorithm 'none' is not accepted")
        if alg not in self.algorithms:
            # Name the algorithm only when it is a known one: the header is the sender's text.
            shown = f"algorithm {alg!r}" if alg in get_default_algorithms() else "the token's algorithm"
            raise Unauthenticated(f"{shown} is not accepted: this server accepts {', '.join(self.algorithms)}")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise Unauthenticated("malformed token: its key id (kid) is not a string")
        key = self._key[alg] if self._key is not None else await self._key_from_set(kid, alg)
        payload = self._decode(token, key, alg)
        return self._principal(payload)

    def _decode(self, token: str, key: Any, alg: str) -> dict[str, Any]:
        try:
            return jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": list(self.required_claims), "enforce_minimum_key_length": True},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated("token expired") from None
        except jwt.ImmatureSignatureError:
            raise Unauthenticated("token not valid yet (nbf or iat is in the future)") from None
        except jwt.InvalidIssuerError:
            raise Unauthenticated("wrong issuer") from None
        except jwt.InvalidAudienceError:
            if self.audience is None:
                raise Unauthenticated("wrong audience: the token names one and this server expects none") from None
            raise Unauthenticated("wrong audience") from None
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthenticated(f"token lacks the {exc.claim!r} claim") from None
        except jwt.InvalidSignatureError:
            raise Unauthenticated("bad signature") from None
        except jwt.InvalidIssuedAtError:
            raise Unauthenticated("malformed token: its 'iat' claim is not a number") from None
        except jwt.InvalidKeyError:
            raise Unauthenticated("the key the token names is too weak or does not fit its algorithm") from None
        except jwt.exceptions.InvalidSubjectError:
            raise Unauthenticated("malformed token: its 'sub' claim is not a string") from None
        except jwt.InvalidTokenError:  # DecodeError and the rest: the token's own structure
            raise Unauthenticated("malformed token") from None

    def _principal(self, payload: dict[str, Any]) -> Principal:
        subject = payload.get(self.id_claim)
        if not isinstance(subject, str) or not subject:
            raise Unauthenticated(f"the token's {self.id_claim!r} claim is not a non-empty string")
        roles: set[str] = set()
        if self.roles_claim is not None and self.roles_claim in payload:
            found = _words(payload[self.roles_claim])
            if found is None:
                raise Unauthenticated(
                    f"the token's {self.roles_claim!r} claim is neither a list of strings nor a space-separated string"
                )
            roles.update(found)
        if self.scope_claim is not None and self.scope_claim in payload:
            found = _words(payload[self.scope_claim])
            if found is None:
                raise Unauthenticated(
                    f"the token's {self.scope_claim!r} claim is neither a list of strings nor a space-separated string"
                )
            roles.update(f"scope:{scope}" for scope in found)
        try:
            return Principal(id=subject, roles=frozenset(roles), claims=payload)
        except ValueError:
            raise Unauthenticated(
                f"the token's {self.id_claim!r} claim is not a usable id: 1-256 printable characters"
            ) from None

    async def _key_from_set(self, kid: str | None, alg: str) -> jwt.PyJWK:
        # A request fetches at most once, and never right after a fetch it waited for: so requests that pile up
        # while the provider is down share one failed fetch instead of starting one each.
        waited = False
        if self.jwks_url is not None:
            if self._fetching is not None:  # keys are on their way: use them
                await asyncio.shield(self._fetching)
                waited = True
            now = _monotonic()
            expired = self._fetched_at is None or now - self._fetched_at >= self.jwks_cache_s
            if expired and not waited and (self._keys is None or self._may_refetch(now)):
                await self._refresh()
                waited = True
            if self._keys is None:
                raise AuthUnavailable(f"the signing keys could not be fetched: {self._fetch_error}")
        found = self._pick(kid, alg)
        if found is None and self.jwks_url is not None and not waited and self._may_refetch(_monotonic()):
            await self._refresh()  # an unknown kid: the provider may have rotated its keys
            found = self._pick(kid, alg)
        if found is None:
            raise Unauthenticated("unknown key id (kid)")
        try:
            return found.for_alg(alg)
        except jwt.PyJWTError:  # its message holds the key: say only what is wrong
            raise Unauthenticated(f"the key the token names is not a usable {alg} key") from None

    def _pick(self, kid: str | None, alg: str) -> _Jwk | None:
        """The key for ``kid`` and ``alg``; None when no key has that id."""
        keys = self._keys or []
        if kid is None:
            fitting = [k for k in keys if k.fits(alg)]
            if len(fitting) != 1:
                raise Unauthenticated(f"token names no key id (kid), and the key set holds {len(fitting)} {alg} keys")
            return fitting[0]
        named = [k for k in keys if k.kid == kid]
        if not named:
            return None
        for candidate in named:
            if candidate.fits(alg):
                return candidate
        raise Unauthenticated(f"the key the token's key id names is not a {alg} key")

    def _may_refetch(self, now: float) -> bool:
        return self._attempted_at is None or now - self._attempted_at >= self.min_refetch_s

    async def _refresh(self) -> None:
        """Fetch the key set, or wait for the fetch under way; shielded, so a cancelled request stops no fetch."""
        if self._fetching is None:
            self._fetching = asyncio.get_running_loop().create_task(self._fetch())
        await asyncio.shield(self._fetching)

    async def _fetch(self) -> None:
        assert self.jwks_url is not None
        try:
            timeout = aiohttp.ClientTimeout(total=self.fetch_timeout_s)
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(self.jwks_url, headers={"Accept": "application/json"}) as response,
            ):
                if response.status != 200:
                    raise ValueError(f"{self.jwks_url} answered HTTP {response.status}")
                body = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    body += chunk
                    if len(body) > _MAX_JWKS_BYTES:
                        raise ValueError(f"{self.jwks_url} sent a key set over {_MAX_JWKS_BYTES // 1024} KB")
            try:
                keys = _parse_jwks(json.loads(body))
            except ValueError as exc:
                raise ValueError(f"{self.jwks_url} sent no JWK set: {exc}") from None
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            # Keep the keys already held: the provider being down revokes nothing.
            self._fetch_error = str(exc) or type(exc).__name__
        else:
            self._keys = keys
            self._fetched_at = _monotonic()
            self._fetch_error = ""
        finally:
            self._attempted_at = _monotonic()
            self._fetching = None


def _check_algorithms(algorithms: Sequence[str]) -> tuple[str, ...]:
    if isinstance(algorithms, str) or not isinstance(algorithms, Sequence) or not algorithms:
        raise ConfigurationError("JWTAuth(algorithms=...) must be a non-empty list, such as ['RS256'] or ['ES256']")
    known = set(get_default_algorithms()) - {"none"}
    for alg in algorithms:
        if isinstance(alg, str) and alg.lower() == "none":
            raise ConfigurationError(
                "JWTAuth(algorithms=...) must not hold 'none': it accepts unsigned tokens; "
                "list the algorithm your identity provider signs with, such as 'RS256'"
            )
        if alg not in known:
            raise ConfigurationError(
                f"JWTAuth(algorithms=...) holds {alg!r}, which is not a JWS algorithm; use some of {sorted(known)}"
            )
    hmac = {alg for alg in algorithms if alg.startswith("HS")}
    if hmac and len(hmac) != len(set(algorithms)):
        raise ConfigurationError(
            "JWTAuth(algorithms=...) mixes HMAC (HS*) with public-key algorithms: anyone holding the public key "
            "could then sign tokens with it as the HMAC secret; list one kind only"
        )
    return tuple(dict.fromkeys(algorithms))


def _check_issuer(issuer: str | None) -> str | None:
    if issuer is not None and (not isinstance(issuer, str) or not issuer):
        raise ConfigurationError("JWTAuth(issuer=...) must be the provider's issuer URL as a string, or None")
    return issuer


def _check_audience(audience: str | Sequence[str] | None) -> list[str] | None:
    if audience is None:
        return None
    values = [audience] if isinstance(audience, str) else list(audience)
    if not values or not all(isinstance(value, str) and value for value in values):
        raise ConfigurationError("JWTAuth(audience=...) must be a string or a non-empty list of strings, or None")
    return values


def _check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in _LOCAL_HOSTS):
        return url
    raise ConfigurationError(
        f"JWTAuth(jwks_url={url!r}) must be an https:// URL (http:// only to localhost): "
        "keys fetched in the clear could be replaced on the way"
    )


def _prepare_key(key: str | bytes, algorithms: tuple[str, ...]) -> dict[str, Any]:
    """The key ready for each algorithm; ConfigurationError when it does not fit one or is too weak."""
    if not isinstance(key, str | bytes):
        raise ConfigurationError("JWTAuth(key=...) must be a PEM public key or an HMAC secret, as str or bytes")
    prepared: dict[str, Any] = {}
    for alg in algorithms:
        algorithm = get_default_algorithms()[alg]
        try:
            ready = algorithm.prepare_key(key)
        except (jwt.PyJWTError, ValueError, TypeError):
            what = "an HMAC secret (not a PEM key)" if alg.startswith("HS") else "a PEM public key"
            raise ConfigurationError(f"JWTAuth(key=...) is not usable for {alg}: give {what}") from None
        if isinstance(ready, _PRIVATE_KEYS):
            raise ConfigurationError(
                "JWTAuth(key=...) is a private key: give the public key (the gateway only verifies)"
            )
        weak = algorithm.check_key_length(ready)
        if weak:
            raise ConfigurationError(f"JWTAuth(key=...) is too weak for {alg}: {weak}")
        prepared[alg] = ready
    return prepared


def _read_jwks_file(path: str | Path) -> list[_Jwk]:
    try:
        keys = _parse_jwks(json.loads(Path(path).read_bytes()))
    except OSError as exc:
        raise ConfigurationError(f"JWTAuth(jwks_file=...) could not be read: {exc}") from None
    except ValueError as exc:
        raise ConfigurationError(f"JWTAuth(jwks_file={str(path)!r}) is not a JWK set: {exc}") from None
    if not keys:
        raise ConfigurationError(f"JWTAuth(jwks_file={str(path)!r}) holds no signature key")
    return keys
